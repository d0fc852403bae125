#pragma once
// CUDA launchers behind ops/rope.h (rope.cu), queued on a cudaStream_t passed as
// void*. Same semantics as ops/cpu/rope.h; angles, cos and sin in double. X is
// float (f32 rows, rotated in double) or uint16_t (bf16 bits, rotated in float and
// rounded once).

#include <cstdint>

#include "ops/rope_freq.h"

namespace fanout::ops::cuda {

// out (B, T, H, D) = rope(inp); out may alias inp (with the same ld). D even.
// ld_out, ld_in: elements from one (b, t) row to the next (0: H * D).
template <typename X>
void rope_forward(void* stream, X* out, const X* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                  const RopeFreq& freq, int64_t pos_offset, int64_t ld_out = 0, int64_t ld_in = 0);

// dinp (B, T, H, D) = rotation of dout by the negative angle; dinp may alias dout
// (with the same ld). Row strides as for rope_forward.
template <typename X>
void rope_backward(void* stream, X* dinp, const X* dout, int64_t B, int64_t T, int64_t H, int64_t D,
                   const RopeFreq& freq, int64_t pos_offset, int64_t ld_dinp = 0,
                   int64_t ld_dout = 0);

}  // namespace fanout::ops::cuda
