#pragma once
// Linear layer without bias, as nn.Linear stores it: y = x W^T with W (OC, C).
// Shapes: N rows (B*T), C input channels, OC output channels. The CPU kernels
// call oneDNN single-threaded (ops/cpu/matmul.h): the device threads are the
// parallelism; CUDA runs cublasSgemm for f32 and cuBLASLt for bf16
// (ops/cuda/gemm_cublas.h). dtypes (the bf16 contract): inp, weight (dout) all f32
// or all bf16; bf16 products accumulate in fp32; gradients are always f32.

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// out (N, OC) = inp (N, C) weight (OC, C)^T; out is overwritten. out is f32, or
// bf16 for bf16 inputs (one rounding of the fp32 sum at the store). out's rows are
// ld_out apart (0: OC), for the LM head's padded logits (vocab_padded,
// ops/gemm_plan.h): out holds N * ld_out elements, the last row's padding
// included, and the columns between OC and ld_out are not written.
void matmul_forward(Stream& stream, const Tensor& out, const Tensor& inp, const Tensor& weight,
                    int64_t N, int64_t C, int64_t OC, int64_t ld_out = 0);

// out (N, OC) f32 = residual (N, OC) f32 + inp (N, C) weight (OC, C)^T; out may
// alias residual. The residual add folded into the output projection: on CUDA one
// GEMM with beta 1; on CPU the bits of matmul_forward then residual_forward.
void matmul_forward_residual(Stream& stream, const Tensor& out, const Tensor& residual,
                             const Tensor& inp, const Tensor& weight, int64_t N, int64_t C,
                             int64_t OC);

// How matmul_backward writes dinp: added to what it holds (several GEMMs sum into
// one input gradient), or overwritten (the first of them: no zero fill before).
enum class Dinp { add, overwrite };

// dinp (N, C) += dout weight, dweight (OC, C) += dout^T inp, from dout (N, OC);
// dinp_mode overwrite: dinp = dout weight, whatever dinp held (NaN included).
// An undefined dinp skips that product (the first layer needs no input gradient),
// an undefined dweight the other (matmul_backward_weight_rows computes it in parts).
// dinp and dweight are f32 whatever the dtype of dout, inp and weight. dout's rows
// are ld_dout apart (0: OC), N * ld_dout elements when padded: the columns
// between OC and ld_dout never change the result, but cuBLASLt's vectorised
// kernels may load them, the last row's too (a buffer of (N - 1) * ld + OC
// elements was read past its end on an H100).
void matmul_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, int64_t N, int64_t C, int64_t OC,
                     int64_t ld_dout = 0, Dinp dinp_mode = Dinp::add);

// dweight_rows (rows, C) += dout[:, row0 : row0 + rows]^T inp: rows [row0, row0 +
// rows) of the weight gradient alone, dout (N, OC; rows ld_dout apart, 0: OC) read
// in place, so a large weight's gradient can be produced (and reduced) in parts.
// f32 gradients, inputs as for matmul_backward.
void matmul_backward_weight_rows(Stream& stream, const Tensor& dweight_rows, const Tensor& dout,
                                 const Tensor& inp, int64_t N, int64_t C, int64_t OC, int64_t row0,
                                 int64_t rows, int64_t ld_dout = 0);

}  // namespace fanout::ops
