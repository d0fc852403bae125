// CUDA kernels for the engine's flat-buffer arithmetic (flat.h): grid-stride
// loops over n elements, one launch each on the stream's device (callers loop over
// devices from one thread), checked after launch. bf16 rounds with the integer
// rule of engine/core/dtype.h (ties to even, NaN kept quiet), as the CPU does, so
// the two give the same bits (engine/core/bf16.cuh, shared with ops/cuda/).

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/core/bf16.cuh"
#include "engine/core/cuda_check.h"
#include "engine/core/cuda_guard.h"
#include "engine/core/flat_cuda.h"

namespace fanout::cuda {

namespace {
constexpr int kBlock = 256;

int grid_for(int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<int>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

__device__ __forceinline__ float rounded(float x) {
  return bf16_bits_to_float(float_to_bf16_bits(x));
}
__device__ __forceinline__ float rounded(uint16_t x) {
  return bf16_bits_to_float(x);
}

#define FANOUT_GRID_STRIDE(i, n)                                            \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void fill_kernel(float* dst, int64_t n, float value) {
  FANOUT_GRID_STRIDE(i, n) dst[i] = value;
}
__global__ void add_kernel(float* dst, const float* src, int64_t n) {
  FANOUT_GRID_STRIDE(i, n) dst[i] += src[i];
}
__global__ void add_bf16_kernel(float* dst, const uint16_t* src, int64_t n) {
  FANOUT_GRID_STRIDE(i, n) dst[i] += bf16_bits_to_float(src[i]);
}
__global__ void round_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  FANOUT_GRID_STRIDE(i, n) dst[i] = float_to_bf16_bits(src[i]);
}
template <typename Src>
__global__ void add_round_bf16_kernel(uint16_t* dst, const Src* src, int64_t n) {
  FANOUT_GRID_STRIDE(i, n)
  dst[i] = float_to_bf16_bits(bf16_bits_to_float(dst[i]) + rounded(src[i]));
}
__global__ void widen_bf16_kernel(float* dst, const uint16_t* src, int64_t n) {
  FANOUT_GRID_STRIDE(i, n) dst[i] = bf16_bits_to_float(src[i]);
}
__global__ void scale_kernel(float* dst, int64_t n, float alpha) {
  FANOUT_GRID_STRIDE(i, n) dst[i] *= alpha;
}

#undef FANOUT_GRID_STRIDE

// kernel<<<...>>>(args...) on `stream`'s device, checked.
template <typename... K, typename... A>
void launch(void (*kernel)(K...), void* stream, int64_t n, A... args) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  kernel<<<grid_for(n), kBlock, 0, s>>>(args...);
  FANOUT_CUDA_LAUNCH_CHECK();
}
}  // namespace

void flat_fill_f32(void* stream, float* dst, int64_t n, float value) {
  launch(fill_kernel, stream, n, dst, n, value);
}
void flat_add_f32(void* stream, float* dst, const float* src, int64_t n) {
  launch(add_kernel, stream, n, dst, src, n);
}
void flat_add_bf16_to_f32(void* stream, float* dst, const uint16_t* src, int64_t n) {
  launch(add_bf16_kernel, stream, n, dst, src, n);
}
void flat_round_bf16(void* stream, uint16_t* dst, const float* src, int64_t n) {
  launch(round_bf16_kernel, stream, n, dst, src, n);
}
void flat_add_round_bf16(void* stream, uint16_t* dst, const void* src, bool src_bf16, int64_t n) {
  if (src_bf16)
    launch(add_round_bf16_kernel<uint16_t>, stream, n, dst, static_cast<const uint16_t*>(src), n);
  else
    launch(add_round_bf16_kernel<float>, stream, n, dst, static_cast<const float*>(src), n);
}
void flat_widen_bf16(void* stream, float* dst, const uint16_t* src, int64_t n) {
  launch(widen_bf16_kernel, stream, n, dst, src, n);
}
void flat_scale_f32(void* stream, float* dst, int64_t n, float alpha) {
  launch(scale_kernel, stream, n, dst, n, alpha);
}

}  // namespace fanout::cuda
