#pragma once
// Residual connection: out = a + b over n elements (the (B, T, C) stream plus a
// block's output). Backward hands dout to both branches unchanged.

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// out (n) = a (n) + b (n); out may alias a or b.
void residual_forward(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b,
                      int64_t n);

// da (n) += dout, db (n) += dout.
void residual_backward(Stream& stream, const Tensor& da, const Tensor& db, const Tensor& dout,
                       int64_t n);

}  // namespace fanout::ops
