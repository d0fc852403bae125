// config.json's rope_scaling: llama3 and linear read (rope_type or the older type,
// rope_scaling or transformers 5's rope_parameters), written back and read again
// unchanged; null and "default" are plain RoPE; other types and bad fields refused
// with one line naming them.

#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "models/llama_config.h"
#include "models/rope_scaling.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::models;
using nlohmann::json;

namespace {
json tiny_json() {
  return llama_config_to_json(llama_preset("tiny"));
}

// Llama 3.1 8B's rope_scaling, as its config.json has it.
json llama31_scaling() {
  return {{"factor", 8.0},
          {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 8192},
          {"rope_type", "llama3"}};
}

std::string refusal(const json& j) {
  try {
    llama_config_from_json(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

void check_refused(const json& j, const std::string& phrase) {
  const std::string msg = refusal(j);
  INFO(msg);
  CHECK(msg.find(phrase) != std::string::npos);
  CHECK(msg.find("cfg.json") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
}
}  // namespace

TEST_CASE("rope_scaling llama3 is read field by field, from rope_type or type") {
  for (const char* type_key : {"rope_type", "type"}) {
    CAPTURE(type_key);
    json j = tiny_json();
    json rs = llama31_scaling();
    rs.erase("rope_type");
    rs[type_key] = "llama3";
    rs["factor"] = 32.0;  // Llama 3.2's
    j["rope_scaling"] = rs;
    LlamaConfig c = llama_config_from_json(j, "cfg.json");
    CHECK(c.rope_scaling.type == ops::RopeScalingType::llama3);
    CHECK(c.rope_scaling.factor == 32.0);
    CHECK(c.rope_scaling.low_freq_factor == 1.0);
    CHECK(c.rope_scaling.high_freq_factor == 4.0);
    CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
    CHECK(c.rope().theta == c.rope_theta);
  }
}

TEST_CASE("rope_scaling survives config.json written and read back") {
  std::string dir = test::make_temp_dir("fanout-rope-scaling");
  for (json rs : {llama31_scaling(), json{{"type", "linear"}, {"factor", 2.5}}, json(nullptr)}) {
    CAPTURE(rs.dump());
    json j = tiny_json();
    j["rope_scaling"] = rs;
    LlamaConfig c = llama_config_from_json(j, "cfg.json");
    llama_config_save(c, dir + "/config.json");
    LlamaConfig back = llama_config_load(dir + "/config.json");
    CHECK(back.rope_scaling.type == c.rope_scaling.type);
    CHECK(back.rope_scaling.factor == c.rope_scaling.factor);
    CHECK(back.rope_scaling.low_freq_factor == c.rope_scaling.low_freq_factor);
    CHECK(back.rope_scaling.high_freq_factor == c.rope_scaling.high_freq_factor);
    CHECK(back.rope_scaling.original_max_position_embeddings ==
          c.rope_scaling.original_max_position_embeddings);
    // What is written is HF's own form: rope_type and the same numbers.
    json written = llama_config_to_json(back)["rope_scaling"];
    if (rs.is_null()) {
      CHECK(written.is_null());
    } else {
      CHECK(written["rope_type"] == (rs.contains("type") ? rs["type"] : rs["rope_type"]));
      CHECK(written["factor"] == rs["factor"]);
    }
  }
  CHECK(llama_config_to_json(llama_config_from_json(
            [] {
              json j = tiny_json();
              j["rope_scaling"] = llama31_scaling();
              return j;
            }(),
            "cfg.json"))["rope_scaling"] == llama31_scaling());
  std::filesystem::remove_all(dir);
}

TEST_CASE("rope_scaling null or default is plain RoPE, and so is rope_parameters default") {
  json j = tiny_json();
  j["rope_scaling"] = nullptr;
  CHECK(llama_config_from_json(j, "cfg.json").rope_scaling.type == ops::RopeScalingType::none);
  j["rope_scaling"] = {{"rope_type", "default"}};
  CHECK(llama_config_from_json(j, "cfg.json").rope_scaling.type == ops::RopeScalingType::none);
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_theta", 500000.0}};
  LlamaConfig c = llama_config_from_json(j, "cfg.json");
  CHECK(c.rope_scaling.type == ops::RopeScalingType::none);
  CHECK(c.rope_theta == 500000.0);
}

TEST_CASE("transformers 5's rope_parameters carries llama3 scaling and theta together") {
  json j = tiny_json();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  json rp = llama31_scaling();
  rp["rope_theta"] = 500000.0;
  j["rope_parameters"] = rp;
  LlamaConfig c = llama_config_from_json(j, "cfg.json");
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling.type == ops::RopeScalingType::llama3);
  CHECK(c.rope_scaling.factor == 8.0);
}

TEST_CASE("other rope_scaling types and bad llama3 fields are refused in one line") {
  for (const char* type : {"dynamic", "yarn", "longrope", "ntk", "su"}) {
    json j = tiny_json();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 2.0}};
    check_refused(j, std::string("rope_scaling.rope_type \"") + type + "\" is not supported");
  }
  auto with = [](const char* key, json value) {
    json j = tiny_json();
    j["rope_scaling"] = llama31_scaling();
    if (value.is_discarded()) {
      j["rope_scaling"].erase(key);
    } else {
      j["rope_scaling"][key] = value;
    }
    return j;
  };
  const json gone = json(json::value_t::discarded);
  check_refused(with("factor", gone), "rope_scaling needs \"factor\"");
  check_refused(with("low_freq_factor", gone), "rope_scaling needs \"low_freq_factor\"");
  check_refused(with("high_freq_factor", gone), "rope_scaling needs \"high_freq_factor\"");
  check_refused(with("original_max_position_embeddings", gone),
                "rope_scaling needs \"original_max_position_embeddings\"");
  check_refused(with("factor", 0.0), "rope_scaling.factor must be positive");
  check_refused(with("factor", "8"), "rope_scaling.factor must be a number, got \"8\"");
  check_refused(with("high_freq_factor", 1.0),
                "rope_scaling.high_freq_factor (1) must be greater than low_freq_factor (1)");
  check_refused(with("original_max_position_embeddings", 8192.5),
                "rope_scaling.original_max_position_embeddings must be an integer, got 8192.5");
  check_refused(with("original_max_position_embeddings", 0),
                "original_max_position_embeddings must be positive, got 0");
  check_refused(with("rope_type", 3), "rope_scaling.rope_type must be a string, got 3");
  json j = tiny_json();
  j["rope_scaling"] = 8;
  check_refused(j, "rope_scaling must be a JSON object or null, got 8");
  j["rope_scaling"] = {{"factor", 8.0}};
  check_refused(j, "rope_scaling has \"factor\" but no \"rope_type\"");
}

TEST_CASE("a scaling whose RoPE angles overflow a float is refused, not trained into NaN") {
  // Positive and finite, so the field checks pass; the angles would be inf and every
  // loss NaN (eval printed "loss -nan" and exited 0).
  for (double factor : {1e-320, 1e-300, 1e-40}) {
    for (const char* type : {"llama3", "linear"}) {
      json j = tiny_json();
      j["rope_scaling"] = llama31_scaling();
      j["rope_scaling"]["rope_type"] = type;
      j["rope_scaling"]["factor"] = factor;
      CAPTURE(factor);
      CAPTURE(type);
      check_refused(j, "which no float angle can hold; check the scaling factor");
    }
  }
  json j = tiny_json();
  j["rope_scaling"] = llama31_scaling();
  j["rope_scaling"]["factor"] = 1e-3;  // small but every angle fits
  CHECK(refusal(j) == "(accepted)");
}

TEST_CASE("rope_parameters and rope_scaling that disagree are refused, agreeing ones are read") {
  json j = tiny_json();
  json rp = llama31_scaling();
  rp["rope_theta"] = 500000.0;
  j["rope_parameters"] = rp;
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = llama31_scaling();  // the same, as transformers 5 may write both
  CHECK(llama_config_from_json(j, "cfg.json").rope_scaling.factor == 8.0);
  j["rope_scaling"] = nullptr;  // transformers 4's "plain" marker says nothing against it
  CHECK(llama_config_from_json(j, "cfg.json").rope_scaling.factor == 8.0);

  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  check_refused(j, "rope_scaling ({\"factor\":2.0,\"rope_type\":\"linear\"}) and rope_parameters");
  check_refused(j, "disagree; keep one of them");
  j["rope_scaling"] = llama31_scaling();
  j["rope_scaling"]["factor"] = 4.0;
  check_refused(j, "disagree; keep one of them");
  j["rope_scaling"] = llama31_scaling();
  j["rope_theta"] = 10000.0;
  check_refused(j, "rope_theta (10000) and rope_parameters.rope_theta (500000) disagree");
}
