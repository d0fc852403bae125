// CUDA kernels for the engine's flat-buffer arithmetic (flat.h): grid-stride
// loops over n elements, one launch each on the stream's device (callers loop over
// devices from one thread), checked after launch.

#include <cuda_runtime.h>

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

__global__ void fill_kernel(float* dst, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = value;
}
__global__ void add_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}
__global__ void scale_kernel(float* dst, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] *= alpha;
}
}  // namespace

void flat_fill_f32(void* stream, float* dst, int64_t n, float value) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  fill_kernel<<<grid_for(n), kBlock, 0, s>>>(dst, n, value);
  FANOUT_CUDA_LAUNCH_CHECK();
}
void flat_add_f32(void* stream, float* dst, const float* src, int64_t n) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  add_kernel<<<grid_for(n), kBlock, 0, s>>>(dst, src, n);
  FANOUT_CUDA_LAUNCH_CHECK();
}
void flat_scale_f32(void* stream, float* dst, int64_t n, float alpha) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  scale_kernel<<<grid_for(n), kBlock, 0, s>>>(dst, n, alpha);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::cuda
