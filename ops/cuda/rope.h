#pragma once
// CUDA launchers behind ops/rope.h (rope.cu), queued on a cudaStream_t passed as
// void*. Same semantics as ops/cpu/rope.h; angles, cos and sin in double.

#include <cstdint>

#include "ops/rope_freq.h"

namespace fanout::ops::cuda {

// out (B, T, H, D) = rope(inp); out may alias inp. D even.
void rope_forward_f32(void* stream, float* out, const float* inp, int64_t B, int64_t T, int64_t H,
                      int64_t D, const RopeFreq& freq, int64_t pos_offset);

// dinp (B, T, H, D) = rotation of dout by the negative angle; dinp may alias dout.
void rope_backward_f32(void* stream, float* dinp, const float* dout, int64_t B, int64_t T,
                       int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset);

}  // namespace fanout::ops::cuda
