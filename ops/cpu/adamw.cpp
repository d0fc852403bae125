#include "ops/cpu/adamw.h"

#include "ops/cpu/cast.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "engine/core/check.h"

namespace fanout::ops::cpu {

namespace {

// Elements per task, and per pass over a cached chunk (the working copy's rounding).
constexpr int64_t kChunk = 4096;

// One range of the update; a function of its own so that each target clone
// (FANOUT_VECTOR_CLONES) vectorises the loop: every operation is IEEE-exact
// (multiply, add, divide, sqrt) and none is contracted into an FMA (ops/
// CMakeLists.txt), so all clones, and the CUDA kernel, give the same bits.
template <typename T>
FANOUT_VECTOR_CLONES void adamw_range(T* __restrict params, const T* __restrict grads,
                                      T* __restrict m, T* __restrict v, int64_t begin, int64_t end,
                                      T grad_scale, T decay, T b1, T one_minus_b1, T b2,
                                      T one_minus_b2, T bias_correction2_sqrt, T eps,
                                      T neg_step_size) {
  for (int64_t i = begin; i < end; ++i) {
    T g = grads[i] * grad_scale;
    T p = params[i] * decay;
    T mi = m[i] * b1 + one_minus_b1 * g;
    T vi = v[i] * b2 + one_minus_b2 * g * g;
    T denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    params[i] = p + neg_step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

template <typename T>
void adamw_update(T* params, const T* grads, T* m, T* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t step, T grad_scale,
                  uint16_t* working) {
  // torch.optim.AdamW (single-tensor path) does, with Python floats as scalars:
  //   param.mul_(1 - lr * wd)
  //   exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
  //   exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
  //   denom = (exp_avg_sq.sqrt() / sqrt(1 - b2**step)).add_(eps)
  //   param.addcdiv_(exp_avg, denom, value=-lr / (1 - b1**step))
  // The tensor ops round each scalar to the tensor's dtype; so does this.
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const T b1 = static_cast<T>(beta1), one_minus_b1 = static_cast<T>(1.0 - beta1);
  const T b2 = static_cast<T>(beta2), one_minus_b2 = static_cast<T>(1.0 - beta2);
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const T neg_step_size = static_cast<T>(-lr / bias_correction1);
  const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  const T eps_t = static_cast<T>(eps);
  FANOUT_ASSERT((std::is_same_v<T, float>) || !working, "a bf16 working copy of double params");
  auto update = [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t b = r.begin(); b < r.end(); b += kChunk) {
      const int64_t e = std::min(r.end(), b + kChunk);
      adamw_range(params, grads, m, v, b, e, grad_scale, decay, b1, one_minus_b1, b2, one_minus_b2,
                  bias_correction2_sqrt, eps_t, neg_step_size);
      // The chunk's new params, still in cache, rounded as cast_f32_to_bf16 would.
      if constexpr (std::is_same_v<T, float>) {
        if (working) cast_f32_to_bf16_serial(working + b, params + b, e - b);
      }
    }
  };
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kChunk), update);
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, double, double,
                                  double, double, double, int64_t, float, uint16_t*);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, double,
                                   double, double, double, double, int64_t, double, uint16_t*);

}  // namespace fanout::ops::cpu
