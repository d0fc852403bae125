#include "ops/cpu/embedding.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"

#include <algorithm>
#include <type_traits>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "engine/core/check.h"

namespace fanout::ops::cpu {

namespace {

// A bad id is bad data from the loader (a tokenizer/model mismatch), so it is a
// user error. Checked serially before any write so a failure leaves `out` untouched.
void check_ids(const int32_t* ids, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    FANOUT_CHECK(ids[n] >= 0 && ids[n] < V, "embedding: token id ", ids[n],
                 " is out of range for vocabulary size ", V, " (at position ", n, ")");
  }
}

// Channels per task in the backward scatter: a few cache lines of every row.
constexpr int64_t kChannelGrain = 64;

}  // namespace

// ---------------------------------------------------------------------------

template <typename T, typename Table>
void embedding_forward(T* out, const int32_t* ids, const Table* table, int64_t N, int64_t C,
                       int64_t V) {
  embedding_forward_rows(out, ids, table, N, C, V, 0, V);  // the whole table is one shard
}

template <typename T, typename Table>
void embedding_forward_rows(T* out, const int32_t* ids, const Table* table_rows, int64_t N,
                            int64_t C, int64_t V, int64_t row0, int64_t rows) {
  check_ids(ids, N, V);
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    const int64_t id = ids[n];
    T* y = out + n * C;
    if (id < row0 || id >= row0 + rows) {
      std::fill(y, y + C, T{});  // another shard's row: this one adds zero
      return;
    }
    const Table* row = table_rows + (id - row0) * C;
    if constexpr (std::is_same_v<T, Table>) {
      std::copy(row, row + C, y);
    } else {
      for (int64_t c = 0; c < C; ++c) y[c] = load(row[c]);  // bf16 -> float is exact
    }
  });
}

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t V) {
  check_ids(ids, N, V);
  // Repeated ids hit the same table row, so splitting over tokens would race. Each
  // task owns a band of channels and walks every token in order: no two tasks
  // write the same element, and the sum order (hence the result) is deterministic.
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, C, kChannelGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         for (int64_t n = 0; n < N; ++n) {
                           T* drow = dtable + static_cast<int64_t>(ids[n]) * C;
                           const T* dy = dout + n * C;
                           for (int64_t c = r.begin(); c < r.end(); ++c) drow[c] += dy[c];
                         }
                       });
}

template <typename T>
void embedding_backward_rows(T* dtable_rows, const T* dout, const int32_t* ids, int64_t N,
                             int64_t C, int64_t V, int64_t row0, int64_t rows) {
  check_ids(ids, N, V);
  // As embedding_backward, for the tokens whose ids fall in [row0, row0 + rows).
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, C, kChannelGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         for (int64_t n = 0; n < N; ++n) {
                           const int64_t id = ids[n];
                           if (id < row0 || id >= row0 + rows) continue;
                           T* drow = dtable_rows + (id - row0) * C;
                           const T* dy = dout + n * C;
                           for (int64_t c = r.begin(); c < r.end(); ++c) drow[c] += dy[c];
                         }
                       });
}

template void embedding_backward_rows<float>(float*, const float*, const int32_t*, int64_t, int64_t,
                                             int64_t, int64_t, int64_t);
template void embedding_backward_rows<double>(double*, const double*, const int32_t*, int64_t,
                                              int64_t, int64_t, int64_t, int64_t);
template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t,
                                       int64_t);
template void embedding_forward<float, bf16>(float*, const int32_t*, const bf16*, int64_t, int64_t,
                                             int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int64_t,
                                        int64_t);
template void embedding_forward_rows<float>(float*, const int32_t*, const float*, int64_t, int64_t,
                                            int64_t, int64_t, int64_t);
template void embedding_forward_rows<float, bf16>(float*, const int32_t*, const bf16*, int64_t,
                                                  int64_t, int64_t, int64_t, int64_t);
template void embedding_forward_rows<double>(double*, const int32_t*, const double*, int64_t,
                                             int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t,
                                        int64_t);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t, int64_t,
                                         int64_t);

}  // namespace fanout::ops::cpu
