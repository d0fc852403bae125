#pragma once
// config.json's "rope_scaling" (and transformers 5's "rope_parameters") as
// ops::RopeScaling: null or rope_type "default" is plain RoPE; "linear" and
// "llama3" (the Llama 3.1/3.2 configs) are read with every field checked; any other
// type ("dynamic", "yarn", "longrope", ...) is refused with one line naming it.

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "ops/rope_freq.h"

namespace fanout::models {

// `j` is the rope_scaling object (or rope_parameters, whose rope_theta the caller
// reads); `key` is its name in messages ("rope_scaling"). The type comes from
// "rope_type", or the older "type". Throws fanout::Error "<source>: <key>...".
ops::RopeScaling rope_scaling_from_json(const nlohmann::json& j, const std::string& source,
                                        const std::string& key);

// The rope_scaling value HF writes: null for plain RoPE, else an object with rope_type.
nlohmann::json rope_scaling_to_json(const ops::RopeScaling& scaling);

// Whether two scalings give the same angles (the fields their type uses are equal).
bool rope_scaling_equal(const ops::RopeScaling& a, const ops::RopeScaling& b);

// "none", "linear", "llama3".
const char* rope_scaling_name(ops::RopeScalingType type);

// Throws naming `source` when a field is out of range (factor <= 0, low >= high, ...).
void rope_scaling_validate(const ops::RopeScaling& scaling, const std::string& source);

}  // namespace fanout::models
