#include "ops/cpu/cast.h"

#include "ops/cpu/parallel.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "engine/core/dtype.h"

namespace fanout::ops::cpu {

namespace {
// A cast is a few integer ops per element: split only large arrays.
constexpr int64_t kGrain = 1 << 15;
}  // namespace

// ---------------------------------------------------------------------------

void cast_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         for (int64_t i = r.begin(); i < r.end(); ++i)
                           dst[i] = float_to_bf16(src[i]);
                       });
}

void cast_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         for (int64_t i = r.begin(); i < r.end(); ++i)
                           dst[i] = bf16_to_float(src[i]);
                       });
}

}  // namespace fanout::ops::cpu
