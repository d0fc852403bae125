#include "ops/cpu/rope.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"

#include <cmath>
#include <vector>

#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {

// The type a row rotates in: double for float (as before bf16 existed: the f32
// results stay bit for bit what they were) and double; float for bf16, so that the
// one rounding is float -> bf16 at the store, not double -> float -> bf16.
template <typename Real>
struct RotateIn {
  using type = double;
};
template <>
struct RotateIn<bf16> {
  using type = float;
};

// Rotates every pair (x[i], x[i + D/2]) of every (b, t, h) row by angle * sign:
// sign +1 is the forward rotation, -1 its transpose (the backward). Both halves
// are read before either is written, so out may alias inp.
template <typename Real>
void rope_rotate(Real* out, const Real* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                 double theta, int64_t pos_offset, double sign) {
  using R = typename RotateIn<Real>::type;
  const int64_t half = D / 2;
  // (T, D/2) tables, shared by every batch row and head.
  std::vector<R> cos_t(T * half), sin_t(T * half);
  parallel_for_index(int64_t{0}, T, [&](int64_t t) {
    double pos = static_cast<double>(pos_offset + t);
    for (int64_t i = 0; i < half; ++i) {
      double inv_freq = 1.0 / std::pow(theta, static_cast<double>(2 * i) / D);
      cos_t[t * half + i] = static_cast<R>(std::cos(pos * inv_freq));
      sin_t[t * half + i] = static_cast<R>(sign * std::sin(pos * inv_freq));
    }
  });
  parallel_for_index(int64_t{0}, B * T, [&](int64_t bt) {
    const R* c = cos_t.data() + (bt % T) * half;
    const R* s = sin_t.data() + (bt % T) * half;
    for (int64_t h = 0; h < H; ++h) {
      const Real* x = inp + (bt * H + h) * D;
      Real* y = out + (bt * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        R x1 = load(x[i]), x2 = load(x[i + half]);
        store(y[i], x1 * c[i] - x2 * s[i]);
        store(y[i + half], x2 * c[i] + x1 * s[i]);
      }
    }
  });
}

}  // namespace

// ---

template <typename Real>
void rope_forward(Real* out, const Real* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                  double theta, int64_t pos_offset) {
  rope_rotate(out, inp, B, T, H, D, theta, pos_offset, 1.0);
}

template <typename Real>
void rope_backward(Real* dinp, const Real* dout, int64_t B, int64_t T, int64_t H, int64_t D,
                   double theta, int64_t pos_offset) {
  // The forward is an orthogonal rotation per pair, so its Jacobian-transpose is
  // the rotation by the negative angle.
  rope_rotate(dinp, dout, B, T, H, D, theta, pos_offset, -1.0);
}

template void rope_forward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, double,
                                  int64_t);
template void rope_forward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                   double, int64_t);
template void rope_backward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, double,
                                   int64_t);
template void rope_forward<bf16>(bf16*, const bf16*, int64_t, int64_t, int64_t, int64_t, double,
                                 int64_t);
template void rope_backward<bf16>(bf16*, const bf16*, int64_t, int64_t, int64_t, int64_t, double,
                                  int64_t);
template void rope_backward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                    double, int64_t);

}  // namespace fanout::ops::cpu
