#include "models/llama_layout.h"

namespace fanout::models {

void LlamaLayout::add(std::string name, Shape shape) {
  ParamInfo p;
  p.name = std::move(name);
  p.numel = shape_numel(shape);
  p.decay = shape.size() >= 2;
  p.shape = std::move(shape);
  p.offset = total_;
  total_ += p.numel;
  params_.push_back(std::move(p));
}

LlamaLayout::LlamaLayout(const LlamaConfig& c) {
  int64_t C = c.hidden_size, I = c.intermediate_size;
  int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  embed_ = total_;
  add("model.embed_tokens.weight", {c.vocab_size, C});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    LayerOffsets o{};
    o.begin = total_;
    // HF's module registration order: self_attn, mlp, then the two norms.
    o.q = total_, add(p + "self_attn.q_proj.weight", {q, C});
    o.k = total_, add(p + "self_attn.k_proj.weight", {kv, C});
    o.v = total_, add(p + "self_attn.v_proj.weight", {kv, C});
    o.o = total_, add(p + "self_attn.o_proj.weight", {C, q});
    o.gate = total_, add(p + "mlp.gate_proj.weight", {I, C});
    o.up = total_, add(p + "mlp.up_proj.weight", {I, C});
    o.down = total_, add(p + "mlp.down_proj.weight", {C, I});
    o.ln1 = total_, add(p + "input_layernorm.weight", {C});
    o.ln2 = total_, add(p + "post_attention_layernorm.weight", {C});
    o.end = total_;
    layers_.push_back(o);
  }
  final_norm_ = total_;
  add("model.norm.weight", {C});
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    lm_head_ = total_;
    add("lm_head.weight", {c.vocab_size, C});
  }
}

const ParamInfo* LlamaLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace fanout::models
