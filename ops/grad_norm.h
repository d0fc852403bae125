#pragma once
// Global L2 gradient norm and clipping, as torch.nn.utils.clip_grad_norm_ computes
// them: total_norm = sqrt(sum of squares over every gradient), then every gradient
// is multiplied by clip_coefficient(total_norm, max_norm). fanout folds that
// multiplication into the optimizer: pass the coefficient as adamw_update's
// grad_scale (ops/adamw.h) instead of rescaling the gradient buffer.

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// out (1) = sum_i buf[i]^2 over buf (n), accumulated in double. Overwrites out.
// NaN or Inf in buf makes the result NaN or Inf, so the trainer can detect it.
// For several buffers (or shards), sum the results on the host, then take sqrt.
void norm_squared(Stream& stream, const Tensor& out, const Tensor& buf, int64_t n);

// torch's clip_grad_norm_ factor: min(max_norm / (total_norm + 1e-6), 1). Exactly 1
// when total_norm + 1e-6 <= max_norm; NaN when total_norm is NaN; 0 when it is Inf.
float clip_coefficient(double total_norm, double max_norm);

}  // namespace fanout::ops
