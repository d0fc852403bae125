#include "ops/cpu/swiglu.h"

#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

#include <cmath>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {
// Elements per task: enough exp() calls that a task outweighs its scheduling.
constexpr int64_t kGrain = 1 << 13;
}  // namespace

// ---------------------------------------------------------------------------

template <typename T>
T sigmoid_stable(T x) {
  // Each branch keeps exp() away from overflow: e / (1 + e) alone is inf / inf = NaN
  // for x >> 0, and 1 / (1 + exp(-x)) alone goes through inf for x << 0.
  if (x >= T{0}) return T{1} / (T{1} + std::exp(-x));
  T e = std::exp(x);
  return e / (T{1} + e);
}

namespace {
// out[i] = silu(gate[i]) * up[i] over [b, e). Float takes the vectorisable sigmoid
// (and the AVX clones); double stays with libm for the tests.
FANOUT_VECTOR_CLONES void silu_mul(float* out, const float* gate, const float* up, int64_t b,
                                   int64_t e) {
  for (int64_t i = b; i < e; ++i) out[i] = gate[i] * sigmoid_vec(gate[i]) * up[i];
}
void silu_mul(double* out, const double* gate, const double* up, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) out[i] = gate[i] * sigmoid_stable(gate[i]) * up[i];
}

// silu'(g) = s + g s (1 - s) = s (1 + g (1 - s)) with s = sigmoid(g).
template <typename T, typename Sigmoid>
inline void silu_mul_grad_body(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                               int64_t b, int64_t e, Sigmoid sigmoid) {
  for (int64_t i = b; i < e; ++i) {
    T g = gate[i], u = up[i], dy = dout[i];
    T s = sigmoid(g);
    dgate[i] = dy * u * s * (T{1} + g * (T{1} - s));
    dup[i] = dy * g * s;
  }
}
FANOUT_VECTOR_CLONES void silu_mul_grad(float* dgate, float* dup, const float* dout,
                                        const float* gate, const float* up, int64_t b, int64_t e) {
  silu_mul_grad_body(dgate, dup, dout, gate, up, b, e, [](float g) { return sigmoid_vec(g); });
}
void silu_mul_grad(double* dgate, double* dup, const double* dout, const double* gate,
                   const double* up, int64_t b, int64_t e) {
  silu_mul_grad_body(dgate, dup, dout, gate, up, b, e, [](double g) { return sigmoid_stable(g); });
}
}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
  parallel_for_blocked(
      tbb::blocked_range<int64_t>(0, n, kGrain),
      [&](const tbb::blocked_range<int64_t>& r) { silu_mul(out, gate, up, r.begin(), r.end()); });
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         silu_mul_grad(dgate, dup, dout, gate, up, r.begin(), r.end());
                       });
}

template float sigmoid_stable<float>(float);
template double sigmoid_stable<double>(double);
template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*,
                                     int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*,
                                      int64_t);

}  // namespace fanout::ops::cpu
