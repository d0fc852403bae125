#include "ops/cpu/grad_norm.h"

#include "ops/cpu/parallel.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {
// Fixed chunks summed in parallel, partials summed in order: deterministic, unlike
// tbb::parallel_reduce, whose split points depend on scheduling.
constexpr int64_t kChunk = 1 << 16;
}  // namespace

template <typename T>
void norm_squared(T* out, const T* buf, int64_t n) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  parallel_for_index(int64_t{0}, chunks, [&](int64_t c) {
    int64_t end = std::min(n, (c + 1) * kChunk);
    double s = 0.0;
    for (int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(buf[i]) * buf[i];
    partial[c] = s;
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
