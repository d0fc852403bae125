#include "models/llama_config.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"

namespace fanout::models {

namespace {
using nlohmann::json;

// The byte tokenizer's ids: 0-255 bytes, 256 BOT, 257 EOT, 258 PAD.
LlamaConfig with_byte_tokens(LlamaConfig c) {
  c.bos_token_id = 256;
  c.eos_token_id = 257;
  c.pad_token_id = 258;
  return c;
}

int64_t get_int(const json& j, const char* key, const std::string& source, int64_t fallback,
                bool required) {
  if (!j.contains(key) || j[key].is_null()) {
    FANOUT_CHECK(!required, source, ": missing required key \"", key, "\"");
    return fallback;
  }
  FANOUT_CHECK(j[key].is_number_integer(), source, ": \"", key, "\" must be an integer");
  return j[key].get<int64_t>();
}

double get_number(const json& j, const char* key, const std::string& source, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  FANOUT_CHECK(j[key].is_number(), source, ": \"", key, "\" must be a number");
  return j[key].get<double>();
}
}  // namespace

void LlamaConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* key) {
    FANOUT_CHECK(v > 0, source, ": ", key, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(max_position_embeddings, "max_position_embeddings");
  FANOUT_CHECK(num_attention_heads % num_key_value_heads == 0, source, ": num_attention_heads (",
               num_attention_heads, ") must be a multiple of num_key_value_heads (",
               num_key_value_heads, ")");
  FANOUT_CHECK(head_dim % 2 == 0, source, ": head_dim must be even for RoPE, got ", head_dim);
  FANOUT_CHECK(rms_norm_eps > 0, source, ": rms_norm_eps must be positive");
  FANOUT_CHECK(rope_theta > 0, source, ": rope_theta must be positive");
  FANOUT_CHECK(vocab_size < (int64_t{1} << 31), source, ": vocab_size too large");
}

int64_t LlamaConfig::num_parameters() const {
  int64_t C = hidden_size, I = intermediate_size;
  int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t layer = 2 * C + C * q + 2 * C * kv + q * C + 3 * C * I;
  return vocab_size * C * (tie_word_embeddings ? 1 : 2) + num_hidden_layers * layer + C;
}

std::vector<std::string> llama_preset_names() {
  return {"tiny", "small", "seed"};
}

LlamaConfig llama_preset(std::string_view name) {
  LlamaConfig c;
  if (name == "tiny") {
    c = with_byte_tokens(c);  // the defaults above
  } else if (name == "small") {
    c.vocab_size = 8192, c.hidden_size = 384, c.intermediate_size = 1024;
    c.num_hidden_layers = 6, c.num_attention_heads = 6, c.num_key_value_heads = 2;
    c.head_dim = 64, c.max_position_embeddings = 2048;
  } else if (name == "seed") {
    c.vocab_size = 50000, c.hidden_size = 768, c.intermediate_size = 3072;
    c.num_hidden_layers = 12, c.num_attention_heads = 12, c.num_key_value_heads = 3;
    c.head_dim = 64, c.max_position_embeddings = 2048;
  } else {
    detail::throw_error(detail::str_cat("unknown preset '", std::string(name),
                                        "' (choose tiny, small or seed, or --config FILE.json)"));
  }
  return c;
}

LlamaConfig llama_config_from_json(const json& j, const std::string& source) {
  FANOUT_CHECK(j.is_object(), source, ": expected a JSON object");
  if (j.contains("model_type") && j["model_type"].is_string()) {
    FANOUT_CHECK(j["model_type"] == "llama", source, ": model_type \"",
                 j["model_type"].get<std::string>(), "\" is not supported (only llama)");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    detail::throw_error(source + ": rope_scaling is not supported (plain RoPE only)");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (j.contains(key)) {
      FANOUT_CHECK(j[key].is_boolean() && !j[key].get<bool>(), source, ": ", key,
                   " is not supported (Llama has no biases)");
    }
  }
  if (j.contains("hidden_act")) {
    FANOUT_CHECK(j["hidden_act"] == "silu", source, ": hidden_act ", j["hidden_act"].dump(),
                 " is not supported (only silu)");
  }
  LlamaConfig c;
  c.vocab_size = get_int(j, "vocab_size", source, 0, true);
  c.hidden_size = get_int(j, "hidden_size", source, 0, true);
  c.intermediate_size = get_int(j, "intermediate_size", source, 0, true);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", source, 0, true);
  c.num_attention_heads = get_int(j, "num_attention_heads", source, 0, true);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", source, c.num_attention_heads, false);
  FANOUT_CHECK(c.num_attention_heads > 0, source, ": num_attention_heads must be positive");
  c.head_dim = get_int(j, "head_dim", source, c.hidden_size / c.num_attention_heads, false);
  if (!j.contains("head_dim")) {
    FANOUT_CHECK(c.hidden_size % c.num_attention_heads == 0, source,
                 ": hidden_size must be a multiple of num_attention_heads (or give head_dim)");
  }
  c.max_position_embeddings = get_int(j, "max_position_embeddings", source, 2048, false);
  c.rms_norm_eps = get_number(j, "rms_norm_eps", source, 1e-6);
  double theta = 10000.0;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    if (rp.contains("rope_type")) {
      FANOUT_CHECK(rp["rope_type"] == "default", source, ": rope_parameters.rope_type ",
                   rp["rope_type"].dump(), " is not supported (only default)");
    }
    theta = get_number(rp, "rope_theta", source, theta);
  }
  c.rope_theta = get_number(j, "rope_theta", source, theta);
  if (j.contains("tie_word_embeddings")) {
    FANOUT_CHECK(j["tie_word_embeddings"].is_boolean(), source,
                 ": tie_word_embeddings must be true or false");
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  auto token = [&](const char* key) {
    return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : int64_t{-1};
  };
  c.bos_token_id = token("bos_token_id");
  c.eos_token_id = token("eos_token_id");
  c.pad_token_id = token("pad_token_id");
  c.validate(source);
  return c;
}

json llama_config_to_json(const LlamaConfig& c) {
  json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"torch_dtype", "float32"},
  };
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  return j;
}

LlamaConfig llama_config_load(const std::string& path) {
  std::ifstream in(path);
  FANOUT_CHECK(in.good(), path, ": cannot open the config file");
  json j = json::parse(in, nullptr, false);
  FANOUT_CHECK(!j.is_discarded(), path, ": not valid JSON");
  return llama_config_from_json(j, path);
}

void llama_config_save(const LlamaConfig& config, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  FANOUT_CHECK(out.good(), path, ": cannot write the config file");
  out << llama_config_to_json(config).dump(2) << "\n";
  out.close();
  FANOUT_CHECK(out.good(), path, ": cannot write the config file");
}

}  // namespace fanout::models
