#pragma once
// LlamaConfig: the hyper-parameters of HF's LlamaForCausalLM, read from and
// written to HF config.json keys, plus the built-in presets (tiny, small, seed).
// Settings fanout does not implement (rope scaling other than linear and llama3,
// biases, other activations)
// are refused with a clear message rather than silently ignored; so are sizes whose
// products overflow or whose weights cannot fit in memory, before anything is allocated.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ops/rope_freq.h"

namespace fanout::models {

struct LlamaConfig {
  int64_t vocab_size = 259;
  int64_t hidden_size = 128;
  int64_t intermediate_size = 384;
  int64_t num_hidden_layers = 4;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 2;
  int64_t head_dim = 32;  // hidden_size / num_attention_heads unless given
  int64_t max_position_embeddings = 1024;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;  // config.json's rope_scaling (models/rope_scaling.h)
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;  // -1: not set

  // Throws fanout::Error naming the first inconsistent field (`source`: where it came
  // from), or the sizes when the weights cannot fit (llama_config_check_memory).
  void validate(const std::string& source = "config") const;
  int64_t num_parameters() const;
  // What the RoPE ops need: rope_theta and rope_scaling.
  ops::RopeFreq rope() const { return {rope_theta, rope_scaling}; }
  // The same, with every product checked: an overflow throws naming the fields and `source`.
  int64_t parameters(const std::string& source) const;
  int64_t parameters_per_layer(const std::string& source) const;
};

// Refused as a fanout::Error naming the fields and the bytes: more host memory than
// this machine has (or than kMaxModelBytes) for the fp32 weights (4 bytes a
// parameter) or, when `training`, for weights, gradients and both AdamW moments (16).
constexpr uint64_t kMaxModelBytes = uint64_t{1} << 40;  // 1 TiB
void llama_config_check_memory(const LlamaConfig& config, const std::string& source, bool training);

// "tiny", "small", "seed"; throws fanout::Error listing the presets otherwise.
LlamaConfig llama_preset(std::string_view name);
std::vector<std::string> llama_preset_names();

LlamaConfig llama_config_from_json(const nlohmann::json& j, const std::string& source);
nlohmann::json llama_config_to_json(const LlamaConfig& config);

// A config.json file; errors name the path.
LlamaConfig llama_config_load(const std::string& path);
void llama_config_save(const LlamaConfig& config, const std::string& path);

}  // namespace fanout::models
