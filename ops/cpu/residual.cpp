#include "ops/cpu/residual.h"

#include "ops/cpu/parallel.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {
// An add is memory-bound: below this many elements a task costs more than it saves.
constexpr int64_t kGrain = 1 << 14;
}  // namespace

// ---------------------------------------------------------------------------

template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         for (int64_t i = r.begin(); i < r.end(); ++i) out[i] = a[i] + b[i];
                       });
}

template <typename T>
void residual_backward(T* da, T* db, const T* dout, int64_t n) {
  // One pass for both: if da == db (x + x) the element rightly gets dout twice.
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         for (int64_t i = r.begin(); i < r.end(); ++i) {
                           T g = dout[i];
                           da[i] += g;
                           db[i] += g;
                         }
                       });
}

template void residual_forward<float>(float*, const float*, const float*, int64_t);
template void residual_forward<double>(double*, const double*, const double*, int64_t);
template void residual_backward<float>(float*, float*, const float*, int64_t);
template void residual_backward<double>(double*, double*, const double*, int64_t);

}  // namespace fanout::ops::cpu
