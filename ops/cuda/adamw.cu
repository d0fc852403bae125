// CUDA AdamW: one grid-stride pass updating params, m, v in place. The scalars
// are derived on the host exactly as ops/cpu/adamw.cpp derives them (double, then
// rounded to float), and the per-element arithmetic uses the _rn intrinsics so
// nvcc cannot contract it into FMAs: each operation rounds as the CPU's does.

#include <cmath>

#include "ops/cuda/adamw.h"
#include "ops/cuda/common.cuh"

namespace fanout::ops::cuda {

namespace {

struct AdamWScalars {
  float decay, b1, one_minus_b1, b2, one_minus_b2, neg_step_size, bias_correction2_sqrt, eps;
};

// Same expressions, same order as the CPU loop body:
//   p = param * decay; m = m b1 + (1-b1) g; v = v b2 + ((1-b2) g) g
//   param = p + (neg_step_size m) / (sqrt(v) / bc2_sqrt + eps)
__global__ void adamw_step(float* params, const float* grads, float* m, float* v, int64_t n,
                           AdamWScalars k, float grad_scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = __fmul_rn(grads[i], grad_scale);
    float p = __fmul_rn(params[i], k.decay);
    float mi = __fadd_rn(__fmul_rn(m[i], k.b1), __fmul_rn(k.one_minus_b1, g));
    float vi = __fadd_rn(__fmul_rn(v[i], k.b2), __fmul_rn(__fmul_rn(k.one_minus_b2, g), g));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bias_correction2_sqrt), k.eps);
    params[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(k.neg_step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

// ---

void adamw_update_f32(void* stream, float* params, const float* grads, float* m, float* v,
                      int64_t n, double lr, double beta1, double beta2, double eps,
                      double weight_decay, int64_t step, float grad_scale) {
  if (n <= 0) return;
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  AdamWScalars k;
  k.decay = static_cast<float>(1.0 - lr * weight_decay);
  k.b1 = static_cast<float>(beta1);
  k.one_minus_b1 = static_cast<float>(1.0 - beta1);
  k.b2 = static_cast<float>(beta2);
  k.one_minus_b2 = static_cast<float>(1.0 - beta2);
  k.neg_step_size = static_cast<float>(-lr / bias_correction1);
  k.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  k.eps = static_cast<float>(eps);
  cudaStream_t s = stream_bind(stream);
  adamw_step<<<grid_for(n), kBlock, 0, s>>>(params, grads, m, v, n, k, grad_scale);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
