#pragma once
// CPU reference RoPE (see ops/rope.h), templated on the scalar so the tests can run
// it in double against finite differences. Instantiated for float, double.
// Angles, cos and sin are computed in double whatever the scalar.

#include <cstdint>

namespace fanout::ops::cpu {

// out (B, T, H, D) = rope(inp); out may alias inp. D even.
template <typename Real>
void rope_forward(Real* out, const Real* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                  double theta, int64_t pos_offset);

// dinp (B, T, H, D) = rotation of dout by the negative angle; dinp may alias dout.
template <typename Real>
void rope_backward(Real* dinp, const Real* dout, int64_t B, int64_t T, int64_t H, int64_t D,
                   double theta, int64_t pos_offset);

}  // namespace fanout::ops::cpu
