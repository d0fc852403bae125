#pragma once
// Rotary position embedding as HF Llama applies it to q and k: rotate_half
// (non-interleaved) pairs (x[i], x[i + D/2]), inv_freq_i = 1 / theta^(2i/D),
// angle = (pos_offset + t) * inv_freq_i, inv_freq rescaled as `freq.scaling` says
// (ops/rope_freq.h). Shapes: (B, T, H, D), H query or kv heads. A (b, t) row of
// H * D elements may sit ld elements from the next (0: H * D), so that q and k can
// be read from, and their gradients written into, the fused q/k/v projection's
// rows (Note [Fused projections] in models/llama_model.cpp).

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "ops/rope_freq.h"

namespace fanout::ops {

// out (B, T, H, D) = rope(inp (B, T, H, D)); overwrites out, which may alias inp
// (with the same ld). D must be even. out and inp both f32 or both bf16 (angles in
// double either way). ld_out, ld_in: their row strides (0: H * D).
void rope_forward(Stream& stream, const Tensor& out, const Tensor& inp, int64_t B, int64_t T,
                  int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset,
                  int64_t ld_out = 0, int64_t ld_in = 0);

// dinp (B, T, H, D) = d/dinp from dout (B, T, H, D): the rotation by the negative
// angle. Overwrites dinp, which may alias dout (with the same ld). Both f32 or
// both bf16. ld_dinp, ld_dout: their row strides (0: H * D).
void rope_backward(Stream& stream, const Tensor& dinp, const Tensor& dout, int64_t B, int64_t T,
                   int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset,
                   int64_t ld_dinp = 0, int64_t ld_dout = 0);

}  // namespace fanout::ops
