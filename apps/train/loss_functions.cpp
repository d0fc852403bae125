#include "apps/train/loss_functions.h"

#include "ops/cross_entropy.h"

namespace fanout::train {

parallel::LossFunctions cross_entropy_loss_functions() {
  parallel::LossFunctions f;
  f.forward = [](Stream& s, const Tensor& logits, const Tensor& targets, const Tensor& stats,
                 int32_t ignore_index) {
    int64_t V = logits.size(logits.dim() - 1), N = logits.numel() / V;
    ops::cross_entropy_forward(s, stats, logits, targets, N, V, ignore_index);
  };
  f.backward = [](Stream& s, const Tensor& logits, const Tensor& targets, int32_t ignore_index,
                  float normalizer) {
    int64_t V = logits.size(logits.dim() - 1), N = logits.numel() / V;
    ops::cross_entropy_backward(s, logits, logits, targets, N, V, ignore_index, normalizer);
  };
  return f;
}

}  // namespace fanout::train
