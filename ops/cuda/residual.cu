// CUDA residual add and its backward: grid-stride loops, one element per
// iteration. No __restrict__: the pointers may alias (see ops/cpu/residual.h).

#include "ops/cuda/common.cuh"
#include "ops/cuda/residual.h"

namespace fanout::ops::cuda {

namespace {

__global__ void residual_add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

// Reads dout before either write, and writes da before db, as the CPU kernel.
__global__ void residual_grad_both(float* da, float* db, const float* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = dout[i];
    da[i] += g;
    db[i] += g;
  }
}

}  // namespace

// ---

void residual_forward_f32(void* stream, float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  cudaStream_t s = stream_bind(stream);
  residual_add<<<grid_for(n), kBlock, 0, s>>>(out, a, b, n);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void residual_backward_f32(void* stream, float* da, float* db, const float* dout, int64_t n) {
  if (n <= 0) return;
  cudaStream_t s = stream_bind(stream);
  residual_grad_both<<<grid_for(n), kBlock, 0, s>>>(da, db, dout, n);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
