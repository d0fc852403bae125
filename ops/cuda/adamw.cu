// CUDA AdamW: one grid-stride pass updating params, m, v in place (and writing
// the bf16 working copy when asked), 8 elements a step with 16-byte loads and
// stores where every buffer aligns together (elementwise.cuh). The scalars are
// derived on the host exactly as ops/cpu/adamw.cpp derives them (double, then
// rounded to float), and the per-element arithmetic uses the _rn intrinsics so
// nvcc cannot contract it into FMAs: each operation rounds as the CPU's does.

#include <cmath>

#include "ops/cuda/adamw.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/elementwise.cuh"

namespace fanout::ops::cuda {

namespace {

struct AdamWScalars {
  float decay, b1, one_minus_b1, b2, one_minus_b2, neg_step_size, bias_correction2_sqrt, eps,
      grad_scale;
};

// Same expressions, same order as the CPU loop body:
//   p = param * decay; m = m b1 + (1-b1) g; v = v b2 + ((1-b2) g) g
//   param = p + (neg_step_size m) / (sqrt(v) / bc2_sqrt + eps)
// Returns the new param; mi, vi are updated.
__device__ __forceinline__ float adamw_element(float param, float grad, float& mi, float& vi,
                                               const AdamWScalars& k) {
  float g = __fmul_rn(grad, k.grad_scale);
  float p = __fmul_rn(param, k.decay);
  mi = __fadd_rn(__fmul_rn(mi, k.b1), __fmul_rn(k.one_minus_b1, g));
  vi = __fadd_rn(__fmul_rn(vi, k.b2), __fmul_rn(__fmul_rn(k.one_minus_b2, g), g));
  float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bias_correction2_sqrt), k.eps);
  return __fadd_rn(p, __fdiv_rn(__fmul_rn(k.neg_step_size, mi), denom));
}

// kWorking: also working[i] = the new params[i] rounded once to bf16.
template <bool kWorking>
__global__ void adamw_step(float* params, const float* grads, float* m, float* v, uint16_t* working,
                           int64_t n, AdamWScalars k, VecSplit vs) {
  for (int64_t gi = grid_thread(); gi < vs.groups; gi += grid_stride()) {
    const int64_t i = vs.head + kVec * gi;
    float p[kVec], g[kVec], mi[kVec], vi[kVec];
    load8(params + i, p);
    load8(grads + i, g);
    load8(m + i, mi);
    load8(v + i, vi);
#pragma unroll
    for (int e = 0; e < kVec; ++e) p[e] = adamw_element(p[e], g[e], mi[e], vi[e], k);
    store8(params + i, p);
    store8(m + i, mi);
    store8(v + i, vi);
    if constexpr (kWorking) store8(working + i, p);
  }
  for (int64_t j = grid_thread(); j < vs.scalar(n); j += grid_stride()) {
    const int64_t i = vs.scalar_index(j);
    float mi = m[i], vi = v[i];
    const float p = adamw_element(params[i], grads[i], mi, vi, k);
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
    if constexpr (kWorking) working[i] = float_to_bf16_bits(p);
  }
}

}  // namespace

// ---

void adamw_update_f32(void* stream, float* params, const float* grads, float* m, float* v,
                      int64_t n, double lr, double beta1, double beta2, double eps,
                      double weight_decay, int64_t step, float grad_scale, uint16_t* working) {
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
  k.grad_scale = grad_scale;
  BoundStream s(stream);
  if (working) {
    const VecSplit vs = vec_split(n, params, grads, m, v, working);
    adamw_step<true><<<grid_for(vs.groups > 0 ? vs.groups : n), kBlock, 0, s>>>(params, grads, m, v,
                                                                                working, n, k, vs);
  } else {
    const VecSplit vs = vec_split(n, params, grads, m, v);
    adamw_step<false><<<grid_for(vs.groups > 0 ? vs.groups : n), kBlock, 0, s>>>(
        params, grads, m, v, nullptr, n, k, vs);
  }
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
