#pragma once
// A model directory as HF writes and reads it: config.json (HF Llama keys) and
// model.safetensors (HF names, F32 or BF16). Loading validates every tensor name
// and shape against the config; a tied model needs no lm_head.weight.

#include <memory>
#include <string>

#include "models/llama_model.h"

namespace fanout::models {

// Writes DIR/config.json and DIR/model.safetensors (DIR must exist).
void llama_save(LlamaModel& model, const std::string& dir, bool bf16 = false);

// DIR/config.json; errors name the directory.
LlamaConfig llama_load_config(const std::string& dir);
// Copies DIR/model.safetensors into the model's parameters.
void llama_load_weights(LlamaModel& model, const std::string& dir);
// Both: a ready model on `device`.
std::unique_ptr<LlamaModel> llama_load(const std::string& dir, Device device);

}  // namespace fanout::models
