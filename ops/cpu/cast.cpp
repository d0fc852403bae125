#include "ops/cpu/cast.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"

#include <bit>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {

// A cast is a few integer ops per element: split only large arrays.
constexpr int64_t kGrain = 1 << 15;

// The casts run over every parameter after every optimizer step: built for
// x86-64-v4, AVX2 and the baseline (FANOUT_BF16_CLONES, bf16.h).
FANOUT_BF16_CLONES void f32_to_bf16_range(uint16_t* dst, const float* src, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) dst[i] = float_to_bf16_branchless(src[i]);
}

FANOUT_BF16_CLONES void bf16_to_f32_range(float* dst, const uint16_t* src, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i)
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

}  // namespace

// ---------------------------------------------------------------------------

void cast_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         f32_to_bf16_range(dst, src, r.begin(), r.end());
                       });
}

void cast_f32_to_bf16_serial(uint16_t* dst, const float* src, int64_t n) {
  f32_to_bf16_range(dst, src, 0, n);
}

void cast_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         bf16_to_f32_range(dst, src, r.begin(), r.end());
                       });
}

}  // namespace fanout::ops::cpu
