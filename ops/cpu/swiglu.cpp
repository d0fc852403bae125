#include "ops/cpu/swiglu.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

#include <algorithm>
#include <cmath>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {
// Elements per task: enough exp() calls that a task outweighs its scheduling.
constexpr int64_t kGrain = 1 << 13;

// fn(r, c0, c1) for every piece of a row in tasks of about kGrain elements.
template <typename Fn>
void for_row_pieces(int64_t rows, int64_t cols, const Fn& fn) {
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, rows * cols, kGrain),
                       [&](const tbb::blocked_range<int64_t>& range) {
                         for (int64_t i = range.begin(); i < range.end();) {
                           const int64_t r = i / cols, c0 = i - r * cols;
                           const int64_t c1 = std::min(cols, c0 + (range.end() - i));
                           fn(r, c0, c1);
                           i += c1 - c0;
                         }
                       });
}
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
// out[i] = silu(gate[i]) * up[i] over [b, e), in float for float and bf16 storage,
// with the vectorisable sigmoid (and the AVX clones); double stays with libm for
// the tests. One body for every storage type: bf16 results are the float
// expression rounded once.
template <typename X>
inline void silu_mul_body(X* out, const X* gate, const X* up, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) {
    float g = load(gate[i]);
    store(out[i], g * sigmoid_vec(g) * load(up[i]));
  }
}
FANOUT_VECTOR_CLONES void silu_mul(float* out, const float* gate, const float* up, int64_t b,
                                   int64_t e) {
  silu_mul_body(out, gate, up, b, e);
}
FANOUT_BF16_CLONES void silu_mul(bf16* out, const bf16* gate, const bf16* up, int64_t b,
                                 int64_t e) {
  silu_mul_body(out, gate, up, b, e);
}
void silu_mul(double* out, const double* gate, const double* up, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) out[i] = gate[i] * sigmoid_stable(gate[i]) * up[i];
}

// silu'(g) = s + g s (1 - s) = s (1 + g (1 - s)) with s = sigmoid(g).
template <typename C, typename X, typename G, typename Sigmoid>
inline void silu_mul_grad_body(X* dgate, X* dup, const G* dout, const X* gate, const X* up,
                               int64_t b, int64_t e, Sigmoid sigmoid) {
  for (int64_t i = b; i < e; ++i) {
    C g = load(gate[i]), u = load(up[i]), dy = load(dout[i]);
    C s = sigmoid(g);
    store(dgate[i], dy * u * s * (C{1} + g * (C{1} - s)));
    store(dup[i], dy * g * s);
  }
}
template <typename X, typename G>
inline void silu_mul_grad_float(X* dgate, X* dup, const G* dout, const X* gate, const X* up,
                                int64_t b, int64_t e) {
  silu_mul_grad_body<float>(dgate, dup, dout, gate, up, b, e,
                            [](float g) { return sigmoid_vec(g); });
}
FANOUT_VECTOR_CLONES void silu_mul_grad(float* dgate, float* dup, const float* dout,
                                        const float* gate, const float* up, int64_t b, int64_t e) {
  silu_mul_grad_float(dgate, dup, dout, gate, up, b, e);
}
FANOUT_BF16_CLONES void silu_mul_grad(float* dgate, float* dup, const bf16* dout, const float* gate,
                                      const float* up, int64_t b, int64_t e) {
  silu_mul_grad_float(dgate, dup, dout, gate, up, b, e);
}
FANOUT_BF16_CLONES void silu_mul_grad(bf16* dgate, bf16* dup, const float* dout, const bf16* gate,
                                      const bf16* up, int64_t b, int64_t e) {
  silu_mul_grad_float(dgate, dup, dout, gate, up, b, e);
}
FANOUT_BF16_CLONES void silu_mul_grad(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                                      const bf16* up, int64_t b, int64_t e) {
  silu_mul_grad_float(dgate, dup, dout, gate, up, b, e);
}
void silu_mul_grad(double* dgate, double* dup, const double* dout, const double* gate,
                   const double* up, int64_t b, int64_t e) {
  silu_mul_grad_body<double>(dgate, dup, dout, gate, up, b, e,
                             [](double g) { return sigmoid_stable(g); });
}
}  // namespace

template <typename X>
void swiglu_forward(X* out, const X* gate, const X* up, int64_t rows, int64_t cols, int64_t ld) {
  for_row_pieces(rows, cols, [&](int64_t r, int64_t c0, int64_t c1) {
    silu_mul(out + r * cols, gate + r * ld, up + r * ld, c0, c1);
  });
}

template <typename X, typename G>
void swiglu_backward(X* dgate, X* dup, const G* dout, const X* gate, const X* up, int64_t rows,
                     int64_t cols, int64_t ld) {
  for_row_pieces(rows, cols, [&](int64_t r, int64_t c0, int64_t c1) {
    silu_mul_grad(dgate + r * ld, dup + r * ld, dout + r * cols, gate + r * ld, up + r * ld, c0,
                  c1);
  });
}

template float sigmoid_stable<float>(float);
template double sigmoid_stable<double>(double);
template void swiglu_forward<float>(float*, const float*, const float*, int64_t, int64_t, int64_t);
template void swiglu_forward<bf16>(bf16*, const bf16*, const bf16*, int64_t, int64_t, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t, int64_t,
                                     int64_t);
template void swiglu_backward<float, float>(float*, float*, const float*, const float*,
                                            const float*, int64_t, int64_t, int64_t);
template void swiglu_backward<float, bf16>(float*, float*, const bf16*, const float*, const float*,
                                           int64_t, int64_t, int64_t);
template void swiglu_backward<bf16, float>(bf16*, bf16*, const float*, const bf16*, const bf16*,
                                           int64_t, int64_t, int64_t);
template void swiglu_backward<bf16, bf16>(bf16*, bf16*, const bf16*, const bf16*, const bf16*,
                                          int64_t, int64_t, int64_t);
template void swiglu_backward<double, double>(double*, double*, const double*, const double*,
                                              const double*, int64_t, int64_t, int64_t);

}  // namespace fanout::ops::cpu
