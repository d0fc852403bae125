// CUDA SwiGLU forward and backward: grid-stride loops with the overflow-free
// sigmoid of ops/cpu/swiglu.cpp. expf is the accurate libdevice version (no fast
// math), within 2 ulp of the CPU's std::exp.

#include "ops/cuda/common.cuh"
#include "ops/cuda/swiglu.h"

namespace fanout::ops::cuda {

namespace {

__device__ inline float sigmoid_stable(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}

__global__ void swiglu_gate(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = gate[i];
    out[i] = g * sigmoid_stable(g) * up[i];
  }
}

// silu'(g) = s (1 + g (1 - s)); every input is read before either output is written.
__global__ void swiglu_gate_grad(float* dgate, float* dup, const float* dout, const float* gate,
                                 const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = gate[i], u = up[i], dy = dout[i];
    float s = sigmoid_stable(g);
    float dg = dy * u * s * (1.0f + g * (1.0f - s));
    float du = dy * g * s;
    dgate[i] = dg;
    dup[i] = du;
  }
}

}  // namespace

// ---

void swiglu_forward_f32(void* stream, float* out, const float* gate, const float* up, int64_t n) {
  if (n <= 0) return;
  cudaStream_t s = stream_bind(stream);
  swiglu_gate<<<grid_for(n), kBlock, 0, s>>>(out, gate, up, n);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void swiglu_backward_f32(void* stream, float* dgate, float* dup, const float* dout,
                         const float* gate, const float* up, int64_t n) {
  if (n <= 0) return;
  cudaStream_t s = stream_bind(stream);
  swiglu_gate_grad<<<grid_for(n), kBlock, 0, s>>>(dgate, dup, dout, gate, up, n);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
