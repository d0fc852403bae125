#include "ops/cpu/grad_norm.h"

#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {
// Fixed chunks summed in parallel, partials summed in order: deterministic, unlike
// tbb::parallel_reduce, whose split points depend on scheduling.
constexpr int64_t kChunk = 1 << 16;

// sum of squares of [begin, end) in double: 8 double lanes (one AVX-512 register
// in that clone) so that the loop vectorises without reassociation flags; the
// lanes are added in a fixed order, so the result does not depend on the clone.
template <typename T>
FANOUT_VECTOR_CLONES double squares(const T* __restrict buf, int64_t begin, int64_t end) {
  double acc[8] = {};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(buf[i + j]) * buf[i + j];
  double s = 0.0;
  for (int j = 0; j < 8; ++j) s += acc[j];
  for (; i < end; ++i) s += static_cast<double>(buf[i]) * buf[i];
  return s;
}

}  // namespace

template <typename T>
void norm_squared(T* out, const T* buf, int64_t n) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  parallel_for_index(int64_t{0}, chunks, [&](int64_t c) {
    partial[c] = squares(buf, c * kChunk, std::min(n, (c + 1) * kChunk));
  });
  double total = 0.0;
  for (double s : partial) total += s;
  // A sum beyond T's range is Inf (a plain cast would be undefined behaviour).
  out[0] = total > std::numeric_limits<T>::max() ? std::numeric_limits<T>::infinity()
                                                 : static_cast<T>(total);
}

template void norm_squared<float>(float*, const float*, int64_t);
template void norm_squared<double>(double*, const double*, int64_t);

}  // namespace fanout::ops::cpu
