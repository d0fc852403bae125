#pragma once
// Rotary position embedding as HF Llama applies it to q and k: rotate_half
// (non-interleaved) pairs (x[i], x[i + D/2]), inv_freq_i = 1 / theta^(2i/D),
// angle = (pos_offset + t) * inv_freq_i, inv_freq rescaled as `freq.scaling` says
// (ops/rope_freq.h). Shapes: (B, T, H, D), H query or kv heads.

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "ops/rope_freq.h"

namespace fanout::ops {

// out (B, T, H, D) = rope(inp (B, T, H, D)); overwrites out, which may alias inp.
// D must be even. out and inp both f32 or both bf16 (angles in double either way).
void rope_forward(Stream& stream, const Tensor& out, const Tensor& inp, int64_t B, int64_t T,
                  int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset);

// dinp (B, T, H, D) = d/dinp from dout (B, T, H, D): the rotation by the negative
// angle. Overwrites dinp, which may alias dout. Both f32 or both bf16.
void rope_backward(Stream& stream, const Tensor& dinp, const Tensor& dout, int64_t B, int64_t T,
                   int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset);

}  // namespace fanout::ops
