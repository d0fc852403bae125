#pragma once
// Linear layer without bias, as nn.Linear stores it: y = x W^T with W (OC, C).
// Shapes: N rows (B*T), C input channels, OC output channels. The CPU kernels
// call oneDNN single-threaded (ops/cpu/matmul.h): the device threads are the
// parallelism. dtypes (the bf16 contract): inp, weight (dout) all f32 or all bf16;
// bf16 products accumulate in fp32; gradients are always f32.

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// out (N, OC) = inp (N, C) weight (OC, C)^T; out is overwritten. out is f32, or
// bf16 for bf16 inputs (one rounding of the fp32 sum at the store).
void matmul_forward(Stream& stream, const Tensor& out, const Tensor& inp, const Tensor& weight,
                    int64_t N, int64_t C, int64_t OC);

// dinp (N, C) += dout weight, dweight (OC, C) += dout^T inp, from dout (N, OC).
// An undefined dinp skips that product (the first layer needs no input gradient),
// an undefined dweight the other (matmul_backward_weight_rows computes it in parts).
// dinp and dweight are f32 whatever the dtype of dout, inp and weight.
void matmul_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, int64_t N, int64_t C, int64_t OC);

// dweight_rows (rows, C) += dout[:, row0 : row0 + rows]^T inp: rows [row0, row0 +
// rows) of the weight gradient alone, dout (N, OC) read in place, so a large
// weight's gradient can be produced (and reduced) in parts. f32 gradients, inputs
// as for matmul_backward.
void matmul_backward_weight_rows(Stream& stream, const Tensor& dweight_rows, const Tensor& dout,
                                 const Tensor& inp, int64_t N, int64_t C, int64_t OC, int64_t row0,
                                 int64_t rows);

}  // namespace fanout::ops
