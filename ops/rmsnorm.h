#pragma once
// RMSNorm as HF Llama computes it: y = x * rsqrt(mean(x^2) + eps) * weight, with
// fp32 statistics. Forward saves rstd (one per row) for backward.
// Shapes: N rows (B*T) of C channels.

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// out (N, C) = rmsnorm(inp (N, C)) * weight (C); rstd (N) saved for backward.
// inp, rstd f32; weight and out f32 or bf16 (fp32 math, out rounded once).
void rmsnorm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                     const Tensor& weight, int64_t N, int64_t C, float eps);

// dinp (N, C) += d/dinp, dweight (C) += d/dweight, from dout (N, C). All f32 but
// the weight, f32 or bf16.
void rmsnorm_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                      const Tensor& inp, const Tensor& weight, const Tensor& rstd, int64_t N,
                      int64_t C);

}  // namespace fanout::ops
