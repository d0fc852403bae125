// LlamaConfig: the presets of DESIGN.md §3, the HF config.json keys both ways,
// and every unsupported or inconsistent setting refused with a message naming it.

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "models/llama_config.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/input_util.h"

using namespace fanout;
using namespace fanout::models;
using nlohmann::json;

using fanout::test::error_of;
using fanout::test::file_write;
using fanout::test::TempDir;

namespace {

// An HF-style config.json of the tiny preset.
json tiny_json() {
  return llama_config_to_json(llama_preset("tiny"));
}

std::string from_json_error(const json& j) {
  return error_of([&] { llama_config_from_json(j, "cfg.json"); });
}

void check_refused(const json& j, const std::string& phrase) {
  std::string msg = from_json_error(j);
  INFO("message: " << msg);
  CHECK(msg.find("cfg.json: ") == 0);
  CHECK(msg.find(phrase) != std::string::npos);
}
}  // namespace

TEST_CASE("presets match the DESIGN table") {
  struct Row {
    const char* name;
    int64_t vocab, hidden, inter, layers, heads, kv, max_pos;
  };
  for (Row r :
       {Row{"tiny", 259, 128, 384, 4, 4, 2, 1024}, Row{"small", 8192, 384, 1024, 6, 6, 2, 2048},
        Row{"seed", 50000, 768, 3072, 12, 12, 3, 2048}}) {
    CAPTURE(r.name);
    LlamaConfig c = llama_preset(r.name);
    CHECK(c.vocab_size == r.vocab);
    CHECK(c.hidden_size == r.hidden);
    CHECK(c.intermediate_size == r.inter);
    CHECK(c.num_hidden_layers == r.layers);
    CHECK(c.num_attention_heads == r.heads);
    CHECK(c.num_key_value_heads == r.kv);
    CHECK(c.head_dim == r.hidden / r.heads);
    CHECK(c.max_position_embeddings == r.max_pos);
    CHECK(c.rms_norm_eps == 1e-5);
    CHECK(c.rope_theta == 10000.0);
    CHECK_FALSE(c.tie_word_embeddings);
    CHECK_NOTHROW(c.validate());
  }
  LlamaConfig tiny = llama_preset("tiny");  // the byte tokenizer's ids
  CHECK(tiny.bos_token_id == 256);
  CHECK(tiny.eos_token_id == 257);
  CHECK(tiny.pad_token_id == 258);
  CHECK(llama_preset_names() == std::vector<std::string>{"tiny", "small", "seed"});
}

TEST_CASE("an unknown preset name is refused listing the presets") {
  std::string msg = error_of([] { llama_preset("huge"); });
  CHECK(msg.find("unknown preset 'huge'") != std::string::npos);
  CHECK(msg.find("tiny, small or seed") != std::string::npos);
}

TEST_CASE("configs round trip through HF JSON") {
  for (const std::string& name : llama_preset_names()) {
    CAPTURE(name);
    LlamaConfig c = llama_preset(name);
    c.tie_word_embeddings = name == "small";
    c.rope_theta = 500000.0;
    c.rms_norm_eps = 1e-6;
    c.head_dim = c.hidden_size / c.num_attention_heads * 2;  // not the default
    json j = llama_config_to_json(c);
    CHECK(j["model_type"] == "llama");
    CHECK(j["architectures"] == json::array({"LlamaForCausalLM"}));
    LlamaConfig back = llama_config_from_json(json::parse(j.dump()), "cfg.json");
    CHECK(llama_config_to_json(back) == j);
    CHECK(back.head_dim == c.head_dim);
    CHECK(back.tie_word_embeddings == c.tie_word_embeddings);
    CHECK(back.rope_theta == c.rope_theta);
    CHECK(back.bos_token_id == c.bos_token_id);
    CHECK(back.num_parameters() == c.num_parameters());
  }
}

TEST_CASE("rope_parameters.rope_theta is read when rope_theta is absent") {
  json j = tiny_json();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  CHECK(llama_config_from_json(j, "cfg.json").rope_theta == 500000.0);
  j["rope_parameters"]["rope_type"] = "yarn";
  check_refused(j, "rope_parameters.rope_type \"yarn\" is not supported");
}

TEST_CASE("absent optional keys take HF defaults") {
  json j = {{"vocab_size", 100},
            {"hidden_size", 64},
            {"intermediate_size", 96},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4}};
  LlamaConfig c = llama_config_from_json(j, "cfg.json");
  CHECK(c.head_dim == 16);  // hidden / heads
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.max_position_embeddings == 2048);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.rope_theta == 10000.0);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.bos_token_id == -1);
  j["hidden_size"] = 66;  // not a multiple of 4 heads, and no head_dim
  check_refused(j, "hidden_size must be a multiple of num_attention_heads");
  j["head_dim"] = 8;
  CHECK(llama_config_from_json(j, "cfg.json").head_dim == 8);
}

TEST_CASE("unsupported settings are refused naming them") {
  json j = tiny_json();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}};
  check_refused(j, "rope_scaling.rope_type \"yarn\" is not supported");
  j = tiny_json();
  j["attention_bias"] = true;
  check_refused(j, "attention_bias is not supported");
  j = tiny_json();
  j["mlp_bias"] = true;
  check_refused(j, "mlp_bias is not supported");
  j = tiny_json();
  j["hidden_act"] = "gelu";
  check_refused(j, "hidden_act \"gelu\" is not supported");
  j = tiny_json();
  j["model_type"] = "mistral";
  check_refused(j, "model_type \"mistral\" is not supported");
  j = tiny_json();  // the explicit "no" values are fine
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  CHECK_NOTHROW(llama_config_from_json(j, "cfg.json"));
}

TEST_CASE("missing keys and wrong types are refused naming the key") {
  json j = tiny_json();
  j.erase("num_hidden_layers");
  check_refused(j, "missing required key \"num_hidden_layers\"");
  j = tiny_json();
  j["vocab_size"] = "259";
  check_refused(j, "\"vocab_size\" must be an integer");
  j = tiny_json();
  j["rms_norm_eps"] = "small";
  check_refused(j, "\"rms_norm_eps\" must be a number");
  j = tiny_json();
  j["tie_word_embeddings"] = 1;
  check_refused(j, "tie_word_embeddings must be true or false");
  check_refused(json::array({1, 2}), "expected a JSON object");
}

TEST_CASE("inconsistent values are refused naming the field") {
  json j = tiny_json();
  j["num_attention_heads"] = 6;  // kv heads 2 divide it; make kv 4
  j["num_key_value_heads"] = 4;
  check_refused(j, "num_attention_heads (6) must be a multiple of num_key_value_heads (4)");
  j = tiny_json();
  j["head_dim"] = 31;
  check_refused(j, "head_dim must be even for RoPE, got 31");
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_key_value_heads", "max_position_embeddings"}) {
    CAPTURE(key);
    j = tiny_json();
    j[key] = -8;
    check_refused(j, std::string(key) + " must be positive, got -8");
  }
  j = tiny_json();
  j["rms_norm_eps"] = 0.0;
  check_refused(j, "rms_norm_eps must be positive");
  j = tiny_json();
  j["rope_theta"] = -1.0;
  check_refused(j, "rope_theta must be positive");
  LlamaConfig c = llama_preset("tiny");
  c.num_hidden_layers = 0;
  CHECK(error_of([&] { c.validate("mine"); }) == "mine: num_hidden_layers must be positive, got 0");
}

// --- sizes and types from config.json (issue 17) ------------------------------

TEST_CASE("sizes whose products overflow are refused naming the fields before allocating") {
  json j = tiny_json();
  j["hidden_size"] = int64_t{1} << 40;
  j["intermediate_size"] = int64_t{1} << 40;
  j["head_dim"] = 64;
  check_refused(j, "does not fit in 64 bits");
  CHECK(from_json_error(j).find("hidden_size") != std::string::npos);
  j = tiny_json();
  j["num_hidden_layers"] = int64_t{1} << 62;
  check_refused(j, "num_hidden_layers x the parameters of one layer is too large");
  // An unsigned value past int64 must not wrap into a negative one.
  j = tiny_json();
  j["num_hidden_layers"] = std::numeric_limits<uint64_t>::max();
  check_refused(j, "\"num_hidden_layers\" is 18446744073709551615, out of range");
}

TEST_CASE("a model whose weights cannot fit is refused naming the fields and the bytes") {
  // 2,000,000,000 layers of a tiny model: 3.9e14 parameters, 1.6 PB of weights. The
  // old code went on to lay out 18e9 tensors (a hang, then std::bad_alloc).
  json j = tiny_json();
  j["num_hidden_layers"] = 2'000'000'000;
  const std::string msg = from_json_error(j);
  INFO("message: " << msg);
  CHECK(msg.find("cfg.json: the model has ") == 0);
  CHECK(msg.find("num_hidden_layers 2000000000 x 196864 per layer") != std::string::npos);
  CHECK(msg.find("fp32 weights need 1574912000265728 bytes") != std::string::npos);
  j = tiny_json();
  j["vocab_size"] = 2'000'000'000;
  j["hidden_size"] = 65536;
  j["head_dim"] = 64;
  check_refused(j, "vocab_size 2000000000 x hidden_size 65536 embeddings");
  // Training needs four times the weights' bytes.
  const LlamaConfig tiny = llama_preset("tiny");
  CHECK_NOTHROW(llama_config_check_memory(tiny, "tiny", true));
  LlamaConfig big = tiny;
  big.num_hidden_layers = 20'000'000;  // 3.9e12 parameters: 63 TB to train
  CHECK(error_of([&] {
          llama_config_check_memory(big, "big", true);
        }).find("weights, gradients and two AdamW moments need 62996481062912") !=
        std::string::npos);
  CHECK(error_of([&] { big.validate("big"); }).find("big: the model has") == 0);
  // Layers small enough to fit in bytes still cost a name each: bounded too.
  LlamaConfig thin = tiny;
  thin.hidden_size = thin.intermediate_size = 2;
  thin.num_attention_heads = thin.num_key_value_heads = 1;
  thin.head_dim = 2;
  thin.num_hidden_layers = 100'000;
  CHECK(error_of([&] { thin.validate("thin"); }) ==
        "thin: num_hidden_layers 100000 is more than the 65536 fanout supports");
}

TEST_CASE("config.json type errors name the field and what was expected") {
  json j = tiny_json();
  j["model_type"] = 3;
  check_refused(j, "model_type must be a string (\"llama\"), got 3");
  j = tiny_json();
  j["hidden_act"] = json::array({"silu"});
  check_refused(j, "hidden_act must be a string (\"silu\"), got a JSON array");
  j = tiny_json();
  j["rope_parameters"] = 5;
  check_refused(j, "rope_parameters must be a JSON object, got 5");
  j = tiny_json();
  j["rope_parameters"] = {{"rope_type", 1}};
  check_refused(j, "rope_parameters.rope_type must be a string, got 1");
  j = tiny_json();
  j["attention_bias"] = "no";
  check_refused(j, "attention_bias must be true or false, got \"no\"");
  j = tiny_json();
  j["vocab_size"] = 259.5;
  check_refused(j, "\"vocab_size\" must be an integer, got 259.5");
  j = tiny_json();
  j["rms_norm_eps"] = json::object();
  check_refused(j, "\"rms_norm_eps\" must be a number, got a JSON object");
}

TEST_CASE("llama_config_load names JSON errors and refuses a FIFO without blocking") {
  TempDir dir;
  file_write(dir / "bad.json", "{\"vocab_size\": 259,");
  const std::string bad = error_of([&] { llama_config_load(dir / "bad.json"); });
  CHECK(bad.find(dir / "bad.json: not valid JSON: ") == 0);
  CHECK(bad.find("json.exception") == std::string::npos);
  // A number past double names itself rather than becoming infinity.
  json j = tiny_json();
  std::string text = j.dump();
  text.replace(text.find("\"rope_theta\":10000.0"), 20, "\"rope_theta\":1e999");
  file_write(dir / "inf.json", text);
  CHECK(error_of([&] { llama_config_load(dir / "inf.json"); }) ==
        dir / "inf.json: not valid JSON: number overflow parsing '1e999'");
  fanout::test::Fifo fifo(dir / "config.json");
  CHECK(error_of([&] { llama_config_load(fifo.path()); }) ==
        fifo.path() + ": is a FIFO, not a regular file");
  CHECK(error_of([&] { llama_config_load(dir / "missing.json"); }) ==
        dir / "missing.json: no such file");
}
