#pragma once
// AdamW on flat fp32 buffers with torch.optim.AdamW semantics (decoupled weight
// decay, bias correction, amsgrad off, maximize off), in torch's order of
// operations and in fp32 like torch. One call updates one contiguous range.
//
// Weight decay per tensor (DESIGN.md 5: decay only tensors with >= 2 dims) is the
// caller's job: call adamw_update once per contiguous range of the flat buffer,
// with weight_decay = 0 for the ranges of 1-D tensors (norm weights).

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
};

// One AdamW step (step counts from 1) on params, m, v (n each), with
// g = grads * grad_scale (grad_scale folds in clipping: see ops/grad_norm.h):
//   p *= 1 - lr * wd
//   m = b1 * m + (1 - b1) * g
//   v = b2 * v + (1 - b2) * g * g
//   p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps)
// params, grads, m, v f32. working (n) bf16, when defined: the updated params rounded
// once (what a separate cast_f32_to_bf16 would give, bit for bit), written in the same
// pass -- the bf16 working weights of Note [Mixed precision] (models/llama_model.cpp).
void adamw_update(Stream& stream, const Tensor& params, const Tensor& grads, const Tensor& m,
                  const Tensor& v, int64_t n, const AdamWConfig& config, int64_t step,
                  float grad_scale, const Tensor& working = Tensor());

}  // namespace fanout::ops
