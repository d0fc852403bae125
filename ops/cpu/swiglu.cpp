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

namespace {
// Float takes the vectorisable sigmoid; double stays with libm for the tests.
inline float sigmoid_fast(float x) {
  return sigmoid_vec(x);
}
inline double sigmoid_fast(double x) {
  return sigmoid_stable(x);
}
}  // namespace

template <typename T>
T sigmoid_stable(T x) {
  // Each branch keeps exp() away from overflow: e / (1 + e) alone is inf / inf = NaN
  // for x >> 0, and 1 / (1 + exp(-x)) alone goes through inf for x << 0.
  if (x >= T{0}) return T{1} / (T{1} + std::exp(-x));
  T e = std::exp(x);
  return e / (T{1} + e);
}

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         for (int64_t i = r.begin(); i < r.end(); ++i) {
                           T g = gate[i];
                           out[i] = g * sigmoid_fast(g) * up[i];
                         }
                       });
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  // silu'(g) = s + g s (1 - s) = s (1 + g (1 - s)) with s = sigmoid(g).
  parallel_for_blocked(tbb::blocked_range<int64_t>(0, n, kGrain),
                       [&](const tbb::blocked_range<int64_t>& r) {
                         for (int64_t i = r.begin(); i < r.end(); ++i) {
                           T g = gate[i], u = up[i], dy = dout[i];
                           T s = sigmoid_fast(g);
                           dgate[i] = dy * u * s * (T{1} + g * (T{1} - s));
                           dup[i] = dy * g * s;
                         }
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
