// CUDA fp32 <-> bf16 casts: grid-stride loops running the integer rounding of
// engine/core/dtype.h (ties to even, NaN kept quiet; bf16.cuh) rather than the
// cuda_bf16.h intrinsics, so the bits match the CPU by construction. 8 elements a
// step with 16-byte loads and stores where the two pointers align together
// (elementwise.cuh), one at a time elsewhere.

#include "ops/cuda/cast.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/elementwise.cuh"

namespace fanout::ops::cuda {

namespace {

// dst = src, converted through float (rounded once when Dst is bf16).
template <typename Dst, typename Src>
__global__ void cast_elements(Dst* dst, const Src* src, int64_t n, VecSplit v) {
  for (int64_t g = grid_thread(); g < v.groups; g += grid_stride()) {
    const int64_t i = v.head + kVec * g;
    float x[kVec];
    load8(src + i, x);
    store8(dst + i, x);
  }
  for (int64_t j = grid_thread(); j < v.scalar(n); j += grid_stride()) {
    const int64_t i = v.scalar_index(j);
    store(dst, i, load(src, i));
  }
}

template <typename Dst, typename Src>
void cast_launch(void* stream, Dst* dst, const Src* src, int64_t n) {
  if (n <= 0) return;
  const VecSplit v = vec_split(n, dst, src);
  BoundStream s(stream);
  cast_elements<<<grid_for(v.groups > 0 ? v.groups : n), kBlock, 0, s>>>(dst, src, n, v);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace

// ---

void cast_f32_to_bf16(void* stream, uint16_t* dst, const float* src, int64_t n) {
  cast_launch(stream, dst, src, n);
}

void cast_bf16_to_f32(void* stream, float* dst, const uint16_t* src, int64_t n) {
  cast_launch(stream, dst, src, n);
}

}  // namespace fanout::ops::cuda
