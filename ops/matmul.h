#pragma once
// Linear layer without bias, as nn.Linear stores it: y = x W^T with W (OC, C).
// Shapes: N rows (B*T), C input channels, OC output channels. The CPU kernels
// call CBLAS (OpenBLAS) single-threaded: the device threads are the parallelism.

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// out (N, OC) = inp (N, C) weight (OC, C)^T; out is overwritten.
void matmul_forward(Stream& stream, const Tensor& out, const Tensor& inp, const Tensor& weight,
                    int64_t N, int64_t C, int64_t OC);

// dinp (N, C) += dout weight, dweight (OC, C) += dout^T inp, from dout (N, OC).
// An undefined dinp skips that product (the first layer needs no input gradient).
void matmul_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, int64_t N, int64_t C, int64_t OC);

}  // namespace fanout::ops
