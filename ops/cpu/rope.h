#pragma once
// CPU reference RoPE (see ops/rope.h), templated on the storage type: float, bf16
// (ops/cpu/bf16.h), or double for the finite-difference tests. Angles are computed
// in double whatever the storage. float and double rows rotate in double; bf16 rows
// rotate in float (cos and sin rounded to float) and round once at the store.

#include <cstdint>

#include "ops/rope_freq.h"

namespace fanout::ops::cpu {

// out (B, T, H, D) = rope(inp); out may alias inp (with the same ld). D even.
// ld_out, ld_in: elements from one (b, t) row to the next (0: H * D).
template <typename Real>
void rope_forward(Real* out, const Real* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                  const RopeFreq& freq, int64_t pos_offset, int64_t ld_out = 0, int64_t ld_in = 0);

// dinp (B, T, H, D) = rotation of dout by the negative angle; dinp may alias dout
// (with the same ld). Row strides as for rope_forward.
template <typename Real>
void rope_backward(Real* dinp, const Real* dout, int64_t B, int64_t T, int64_t H, int64_t D,
                   const RopeFreq& freq, int64_t pos_offset, int64_t ld_dinp = 0,
                   int64_t ld_dout = 0);

}  // namespace fanout::ops::cpu
