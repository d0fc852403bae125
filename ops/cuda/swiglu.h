#pragma once
// CUDA launchers behind ops/swiglu.h (swiglu.cu), queued on a cudaStream_t passed
// as void*. Same semantics as ops/cpu/swiglu.h: fp32 math, one rounding per store,
// gradients may alias their inputs. Storage types: float (f32) or uint16_t (bf16
// bits), instantiated for every combination ops/swiglu.h allows.

#include <cstdint>

namespace fanout::ops::cuda {

// out (rows, cols) = silu(gate) * up; X for all three. Element (r, c) of gate and
// up is at r * ld + c, of out at r * cols + c (ops/cpu/swiglu.h).
template <typename X>
void swiglu_forward(void* stream, X* out, const X* gate, const X* up, int64_t rows, int64_t cols,
                    int64_t ld);

// dgate, dup (at gate's layout) overwritten from dout (at out's); X for gate, up
// and their gradients, G for dout.
template <typename X, typename G>
void swiglu_backward(void* stream, X* dgate, X* dup, const G* dout, const X* gate, const X* up,
                     int64_t rows, int64_t cols, int64_t ld);

}  // namespace fanout::ops::cuda
