#pragma once
// Autoregressive decoding with a KV cache: feed() runs new tokens (the prompt at
// once, then one token per step) through the model, appending their keys and
// values to per-layer caches, and returns the logits of the last token.

#include <cstdint>
#include <vector>

#include "models/llama_model.h"

namespace fanout::models {

class LlamaGenerator {
 public:
  // Up to max_len positions (at most max_position_embeddings).
  LlamaGenerator(LlamaModel& model, int64_t max_len);

  // ids at positions position()..position()+n-1 -> logits (V) of the last id.
  std::vector<float> feed(const std::vector<int32_t>& ids);
  int64_t position() const { return pos_; }
  int64_t max_len() const { return max_len_; }

 private:
  LlamaModel& model_;
  int64_t max_len_, pos_ = 0;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer (max_len, KV * D)
};

// Index of the largest logit (the first of ties): greedy decoding.
int32_t argmax(const std::vector<float>& logits);

}  // namespace fanout::models
