#include "models/rope_scaling.h"

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"

namespace fanout::models {

namespace {
using nlohmann::json;
using ops::RopeScaling;
using ops::RopeScalingType;

std::string shown(const json& v) {
  return v.is_primitive() ? v.dump() : std::string("a JSON ") + v.type_name();
}

// A required finite number `name` of the rope_scaling object.
double number(const json& j, const char* name, const std::string& where) {
  auto it = j.find(name);
  FANOUT_CHECK(it != j.end() && !it->is_null(), where, " needs \"", name, "\"");
  FANOUT_CHECK(it->is_number(), where, ".", name, " must be a number, got ", shown(*it));
  const double d = it->get<double>();
  FANOUT_CHECK(std::isfinite(d), where, ".", name, " must be finite, got ", it->dump());
  return d;
}
}  // namespace

const char* rope_scaling_name(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::none:
      return "none";
    case RopeScalingType::linear:
      return "linear";
    case RopeScalingType::llama3:
      return "llama3";
  }
  return "?";
}

bool rope_scaling_equal(const RopeScaling& a, const RopeScaling& b) {
  if (a.type != b.type) return false;
  if (a.type == RopeScalingType::none) return true;
  if (a.factor != b.factor) return false;
  return a.type != RopeScalingType::llama3 ||
         (a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
          a.original_max_position_embeddings == b.original_max_position_embeddings);
}

void rope_scaling_validate(const RopeScaling& s, const std::string& where) {
  if (s.type == RopeScalingType::none) return;
  FANOUT_CHECK(std::isfinite(s.factor) && s.factor > 0, where,
               ".factor must be positive and finite, got ", s.factor);
  if (s.type != RopeScalingType::llama3) return;
  FANOUT_CHECK(std::isfinite(s.low_freq_factor) && s.low_freq_factor > 0, where,
               ".low_freq_factor must be positive and finite, got ", s.low_freq_factor);
  // high == low would divide by zero in the smooth band.
  FANOUT_CHECK(std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor, where,
               ".high_freq_factor (", s.high_freq_factor,
               ") must be greater than low_freq_factor (", s.low_freq_factor, ")");
  FANOUT_CHECK(s.original_max_position_embeddings > 0, where,
               ".original_max_position_embeddings must be positive, got ",
               s.original_max_position_embeddings);
}

RopeScaling rope_scaling_from_json(const json& j, const std::string& source,
                                   const std::string& key) {
  const std::string where = source + ": " + key;
  RopeScaling s;
  if (j.is_null()) return s;
  FANOUT_CHECK(j.is_object(), where, " must be a JSON object or null, got ", shown(j));
  // HF renamed "type" to "rope_type" and still reads the old name.
  const json* type = nullptr;
  for (const char* name : {"rope_type", "type"}) {
    auto it = j.find(name);
    if (it != j.end() && !it->is_null()) {
      type = &*it;
      break;
    }
  }
  if (type == nullptr) {
    // transformers 5 writes {"rope_theta": ...} alone for plain RoPE.
    for (const auto& item : j.items()) {
      FANOUT_CHECK(item.key() == "rope_theta", where, " has \"", item.key(),
                   "\" but no \"rope_type\"");
    }
    return s;
  }
  FANOUT_CHECK(type->is_string(), where, ".rope_type must be a string, got ", shown(*type));
  const std::string name = type->get<std::string>();
  if (name == "default") return s;
  if (name == "linear") {
    s.type = RopeScalingType::linear;
    s.factor = number(j, "factor", where);
  } else if (name == "llama3") {
    s.type = RopeScalingType::llama3;
    s.factor = number(j, "factor", where);
    s.low_freq_factor = number(j, "low_freq_factor", where);
    s.high_freq_factor = number(j, "high_freq_factor", where);
    auto it = j.find("original_max_position_embeddings");
    FANOUT_CHECK(it != j.end() && !it->is_null(), where,
                 " needs \"original_max_position_embeddings\"");
    FANOUT_CHECK(it->is_number_integer() &&
                     !(it->is_number_unsigned() && it->get<uint64_t>() > (uint64_t{1} << 40)),
                 where, ".original_max_position_embeddings must be an integer, got ", shown(*it));
    s.original_max_position_embeddings = it->get<int64_t>();
  } else {
    detail::throw_error(detail::str_cat(where, ".rope_type \"", name,
                                        "\" is not supported (only default, linear and llama3)"));
  }
  rope_scaling_validate(s, where);
  return s;
}

json rope_scaling_to_json(const RopeScaling& s) {
  switch (s.type) {
    case RopeScalingType::none:
      return nullptr;
    case RopeScalingType::linear:
      return {{"rope_type", "linear"}, {"factor", s.factor}};
    case RopeScalingType::llama3:
      return {{"rope_type", "llama3"},
              {"factor", s.factor},
              {"low_freq_factor", s.low_freq_factor},
              {"high_freq_factor", s.high_freq_factor},
              {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  return nullptr;
}

}  // namespace fanout::models
