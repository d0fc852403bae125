#pragma once
// CUDA launchers behind ops/swiglu.h (swiglu.cu), queued on a cudaStream_t passed
// as void*. Same semantics as ops/cpu/swiglu.h: gradients may alias their inputs.

#include <cstdint>

namespace fanout::ops::cuda {

// out (n) = silu(gate) * up.
void swiglu_forward_f32(void* stream, float* out, const float* gate, const float* up, int64_t n);

// dgate, dup (n) overwritten from dout (n).
void swiglu_backward_f32(void* stream, float* dgate, float* dup, const float* dout,
                         const float* gate, const float* up, int64_t n);

}  // namespace fanout::ops::cuda
