#include "models/llama_config.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "engine/core/file_io.h"
#include "engine/core/json_parse.h"
#include "models/rope_scaling.h"

namespace fanout::models {

namespace {
using nlohmann::json;

constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;  // HF configs are a few KB
constexpr int64_t kMaxLayers = 65536;                     // the largest Llama has 126

// The byte tokenizer's ids: 0-255 bytes, 256 BOT, 257 EOT, 258 PAD.
LlamaConfig with_byte_tokens(LlamaConfig c) {
  c.bos_token_id = 256;
  c.eos_token_id = 257;
  c.pad_token_id = 258;
  return c;
}

// The value of `key`, or nullptr when absent or null.
const json* find_key(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string json_shown(const json& v) {
  return v.is_primitive() ? v.dump() : std::string("a JSON ") + v.type_name();
}

int64_t get_int(const json& j, const char* key, const std::string& source, int64_t fallback,
                bool required) {
  const json* v = find_key(j, key);
  if (v == nullptr) {
    FANOUT_CHECK(!required, source, ": missing required key \"", key, "\"");
    return fallback;
  }
  FANOUT_CHECK(v->is_number_integer(), source, ": \"", key, "\" must be an integer, got ",
               json_shown(*v));
  // get<int64_t> would wrap an unsigned value past int64 into a negative one.
  FANOUT_CHECK(!v->is_number_unsigned() || v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
               source, ": \"", key, "\" is ", v->dump(), ", out of range");
  return v->get<int64_t>();
}

double get_number(const json& j, const char* key, const std::string& source, double fallback) {
  const json* v = find_key(j, key);
  if (v == nullptr) return fallback;
  FANOUT_CHECK(v->is_number(), source, ": \"", key, "\" must be a number, got ", json_shown(*v));
  const double d = v->get<double>();
  FANOUT_CHECK(std::isfinite(d), source, ": \"", key, "\" must be a finite number, got ",
               v->dump());
  return d;
}

// A string setting that must equal `only` when given.
void check_string(const json& j, const char* key, const char* only, const std::string& source,
                  const std::string& shown_key, const char* what) {
  const json* v = find_key(j, key);
  if (v == nullptr) return;
  FANOUT_CHECK(v->is_string(), source, ": ", shown_key, " must be a string (\"", only, "\"), got ",
               json_shown(*v));
  FANOUT_CHECK(*v == only, source, ": ", shown_key, " ", v->dump(), " is not supported (only ",
               what, ")");
}

// Bytes of physical memory, 0 if unknown.
uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
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
  FANOUT_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0, source,
               ": rms_norm_eps must be positive and finite, got ", rms_norm_eps);
  FANOUT_CHECK(std::isfinite(rope_theta) && rope_theta > 0, source,
               ": rope_theta must be positive and finite, got ", rope_theta);
  rope_scaling_validate(rope_scaling, source + ": rope_scaling");
  // Valid-looking numbers can still make a frequency overflow (a factor of 1e-320):
  // every angle RoPE will use must be a finite float, or every loss would be NaN.
  const ops::RopeFreq freq(rope_theta, rope_scaling);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double inv = ops::rope_inv_freq(freq, i, head_dim);
    const double angle = inv * static_cast<double>(max_position_embeddings);
    FANOUT_CHECK(std::isfinite(static_cast<float>(angle)) && inv > 0, source, ": rope_theta ",
                 rope_theta, " with rope_scaling ", rope_scaling_to_json(rope_scaling).dump(),
                 " gives RoPE frequency ", inv, " for pair ", i, " of head_dim ", head_dim,
                 ", which no float angle can hold; check the scaling factor");
  }
  FANOUT_CHECK(vocab_size < (int64_t{1} << 31), source, ": vocab_size ", vocab_size,
               " is too large (token ids are 32-bit: at most 2147483647)");
  FANOUT_CHECK(max_position_embeddings < (int64_t{1} << 31), source, ": max_position_embeddings ",
               max_position_embeddings, " is too large (at most 2147483647)");
  llama_config_check_memory(*this, source, false);
  // Each layer is 9 named tensors with their own bookkeeping: a model of tiny layers
  // could pass the byte count above and still exhaust memory on names alone.
  FANOUT_CHECK(num_hidden_layers <= kMaxLayers, source, ": num_hidden_layers ", num_hidden_layers,
               " is more than the ", kMaxLayers, " fanout supports");
}

int64_t LlamaConfig::parameters_per_layer(const std::string& source) const {
  const int64_t C = hidden_size, I = intermediate_size;
  const int64_t q =
      size_mul(source + ": num_attention_heads x head_dim", {num_attention_heads, head_dim});
  const int64_t kv =
      size_mul(source + ": num_key_value_heads x head_dim", {num_key_value_heads, head_dim});
  // 2 norms, q/k/v/o projections, gate/up/down.
  const std::string what = source + ": the parameters of one layer (hidden_size " +
                           std::to_string(C) + ", intermediate_size " + std::to_string(I) + ")";
  return size_add(what, {size_mul(what, {2, C}), size_mul(what, {C, q}), size_mul(what, {2, C, kv}),
                         size_mul(what, {q, C}), size_mul(what, {3, C, I})});
}

int64_t LlamaConfig::parameters(const std::string& source) const {
  const int64_t embed = size_mul(source + ": vocab_size x hidden_size", {vocab_size, hidden_size});
  const int64_t layers = size_mul(source + ": num_hidden_layers x the parameters of one layer",
                                  {num_hidden_layers, parameters_per_layer(source)});
  return size_add(source + ": the parameter count", {size_mul(source + ": the embedding parameters",
                                                              {embed, tie_word_embeddings ? 1 : 2}),
                                                     layers, hidden_size});
}

int64_t LlamaConfig::num_parameters() const {
  return parameters("config");
}

void llama_config_check_memory(const LlamaConfig& c, const std::string& source, bool training) {
  const int64_t params = c.parameters(source);
  const int64_t per_param = training ? 16 : 4;
  const char* what = training ? "fp32 weights, gradients and two AdamW moments" : "fp32 weights";
  const std::string explain =
      detail::str_cat("vocab_size ", c.vocab_size, " x hidden_size ", c.hidden_size,
                      " embeddings, num_hidden_layers ", c.num_hidden_layers, " x ",
                      c.parameters_per_layer(source), " per layer");
  const int64_t bytes =
      size_mul(detail::str_cat(source, ": the memory for ", params, " parameters (", explain, ")"),
               {params, per_param});
  const uint64_t physical = physical_memory_bytes();
  const uint64_t limit = physical > 0 ? std::min(kMaxModelBytes, physical) : kMaxModelBytes;
  FANOUT_CHECK(static_cast<uint64_t>(bytes) <= limit, source, ": the model has ", params,
               " parameters (", explain, "); its ", what, " need ", bytes, " bytes, more than ",
               limit == kMaxModelBytes ? "the limit of " : "this machine's memory of ", limit,
               " bytes");
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
  FANOUT_CHECK(j.is_object(), source, ": expected a JSON object, got ", json_shown(j));
  check_string(j, "model_type", "llama", source, "model_type", "llama");
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (const json* v = find_key(j, key)) {
      FANOUT_CHECK(v->is_boolean(), source, ": ", key, " must be true or false, got ",
                   json_shown(*v));
      FANOUT_CHECK(!v->get<bool>(), source, ": ", key, " is not supported (Llama has no biases)");
    }
  }
  check_string(j, "hidden_act", "silu", source, "hidden_act", "silu");
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
  // transformers 4 writes rope_theta and rope_scaling (null when plain); 5 writes
  // rope_parameters. A file may carry both; they must then say the same thing.
  const json* rp = find_key(j, "rope_parameters");
  const json* rs = find_key(j, "rope_scaling");
  double theta = 10000.0;
  if (rp != nullptr) {
    FANOUT_CHECK(rp->is_object(), source, ": rope_parameters must be a JSON object, got ",
                 json_shown(*rp));
    c.rope_scaling = rope_scaling_from_json(*rp, source, "rope_parameters");
    theta = get_number(*rp, "rope_theta", source + ": rope_parameters", theta);
  }
  c.rope_theta = get_number(j, "rope_theta", source, theta);
  FANOUT_CHECK(rp == nullptr || !rp->contains("rope_theta") || c.rope_theta == theta, source,
               ": rope_theta (", c.rope_theta, ") and rope_parameters.rope_theta (", theta,
               ") disagree; keep one of them");
  if (rs != nullptr && !rs->is_null()) {
    const ops::RopeScaling scaling = rope_scaling_from_json(*rs, source, "rope_scaling");
    FANOUT_CHECK(rp == nullptr || rope_scaling_equal(scaling, c.rope_scaling), source,
                 ": rope_scaling (", rope_scaling_to_json(scaling).dump(),
                 ") and rope_parameters (", rope_scaling_to_json(c.rope_scaling).dump(),
                 ") disagree; keep one of them");
    c.rope_scaling = scaling;
  }
  if (const json* tie = find_key(j, "tie_word_embeddings")) {
    FANOUT_CHECK(tie->is_boolean(), source, ": tie_word_embeddings must be true or false, got ",
                 json_shown(*tie));
    c.tie_word_embeddings = tie->get<bool>();
  }
  // HF allows a list of ids for eos_token_id; fanout only uses a single one, so
  // anything but a non-negative id that fits is "not set".
  auto token = [&](const char* key) {
    const json* v = find_key(j, key);
    return v != nullptr && v->is_number_unsigned() && v->get<uint64_t>() < (uint64_t{1} << 31)
               ? v->get<int64_t>()
               : int64_t{-1};
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
      {"rope_scaling", rope_scaling_to_json(c.rope_scaling)},
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
  // Only a regular file is read (a FIFO would block), and only up to a size no config needs.
  const std::string text = file_read_regular(path, kMaxConfigBytes);
  return llama_config_from_json(json_parse(text, path), path);
}

void llama_config_save(const LlamaConfig& config, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  FANOUT_CHECK(out.good(), path, ": cannot write the config file");
  out << llama_config_to_json(config).dump(2) << "\n";
  out.close();
  FANOUT_CHECK(out.good(), path, ": cannot write the config file");
}

}  // namespace fanout::models
