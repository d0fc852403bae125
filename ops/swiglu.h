#pragma once
// SwiGLU, the gate of Llama's MLP: out = silu(gate) * up with silu(x) = x sigmoid(x).
// gate and up are the two (B, T, hidden) projections, flattened to n elements.
// Backward recomputes the sigmoid from gate rather than saving it.

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// out (n) = silu(gate (n)) * up (n); all three f32 or all bf16 (fp32 math).
void swiglu_forward(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up,
                    int64_t n);

// dgate (n), dup (n) = gradients from dout (n); both are overwritten. gate, up,
// dgate, dup share one dtype (f32 or bf16); dout is f32 or bf16.
void swiglu_backward(Stream& stream, const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                     const Tensor& gate, const Tensor& up, int64_t n);

// Over rows, for the fused gate/up projection's (N, 2 I) output (Note [Fused
// projections] in models/llama_model.cpp): element (r, c) of gate, up, dgate and
// dup is at r * ld + c of its view (up = gate + I, ld = 2 I there), of out and
// dout at r * cols + c. ld >= cols; ld == cols is the flat case.
void swiglu_forward_rows(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up,
                         int64_t rows, int64_t cols, int64_t ld);
void swiglu_backward_rows(Stream& stream, const Tensor& dgate, const Tensor& dup,
                          const Tensor& dout, const Tensor& gate, const Tensor& up, int64_t rows,
                          int64_t cols, int64_t ld);

}  // namespace fanout::ops
