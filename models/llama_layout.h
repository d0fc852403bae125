#pragma once
// The flat parameter layout of a Llama model: every tensor, in HF's state_dict
// order and with HF's names, at an offset into one f32 buffer (the gradient
// buffer uses the same layout). Weight decay applies to tensors with >= 2 dims.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "models/llama_config.h"

namespace fanout::models {

struct ParamInfo {
  std::string name;  // e.g. "model.layers.3.self_attn.q_proj.weight"
  Shape shape;       // Linear weights are [out, in]
  int64_t offset = 0, numel = 0;
  bool decay = false;  // >= 2 dims
};

// Offsets of one decoder layer's tensors.
struct LayerOffsets {
  int64_t q, k, v, o, gate, up, down, ln1, ln2;
  int64_t begin, end;  // the layer's contiguous range
};

class LlamaLayout {
 public:
  explicit LlamaLayout(const LlamaConfig& config);

  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo* find(const std::string& name) const;  // nullptr if absent
  int64_t total() const { return total_; }

  int64_t embed() const { return embed_; }
  int64_t final_norm() const { return final_norm_; }
  int64_t lm_head() const { return lm_head_; }  // == embed() when tied
  const LayerOffsets& layer(int64_t l) const { return layers_[l]; }

 private:
  void add(std::string name, Shape shape);
  std::vector<ParamInfo> params_;
  std::vector<LayerOffsets> layers_;
  int64_t total_ = 0, embed_ = 0, final_norm_ = 0, lm_head_ = 0;
};

}  // namespace fanout::models
