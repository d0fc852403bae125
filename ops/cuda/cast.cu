// CUDA fp32 <-> bf16 casts: grid-stride loops running the integer rounding of
// engine/core/dtype.h (ties to even, NaN kept quiet) rather than the cuda_bf16.h
// intrinsics, so the bits match the CPU by construction.

#include "ops/cuda/cast.h"
#include "ops/cuda/common.cuh"

namespace fanout::ops::cuda {

namespace {

__device__ inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);       // ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

__global__ void f32_to_bf16_rne(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = float_to_bf16_bits(src[i]);
}

__global__ void bf16_to_f32_exact(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
}

}  // namespace

// ---

void cast_f32_to_bf16(void* stream, uint16_t* dst, const float* src, int64_t n) {
  if (n <= 0) return;
  cudaStream_t s = stream_bind(stream);
  f32_to_bf16_rne<<<grid_for(n), kBlock, 0, s>>>(dst, src, n);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void cast_bf16_to_f32(void* stream, float* dst, const uint16_t* src, int64_t n) {
  if (n <= 0) return;
  cudaStream_t s = stream_bind(stream);
  bf16_to_f32_exact<<<grid_for(n), kBlock, 0, s>>>(dst, src, n);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
