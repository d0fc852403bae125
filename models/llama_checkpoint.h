#pragma once
// A model directory as HF writes and reads it: config.json (HF Llama keys) and
// model.safetensors (HF names, F32 or BF16), or HF's sharded form
// (model.safetensors.index.json and its shards, models/safetensors_index.h). Loading
// validates every tensor name and shape against the config; a tied model needs no
// lm_head.weight. Writing is always the single file.

#include <memory>
#include <string>
#include <vector>

#include "models/llama_model.h"

namespace fanout::models {

// Writes DIR/config.json and DIR/model.safetensors (DIR must exist).
void llama_save(LlamaModel& model, const std::string& dir, bool bf16 = false);

// The same from host memory: `params` in flat layout order, written with HF names.
void llama_write_weights(const LlamaConfig& config, const std::vector<float>& params,
                         const std::string& path, bool bf16 = false);
// `path` (a model.safetensors, or a model.safetensors.index.json with its shards
// beside it) into `params` (flat layout order), validating every
// name and shape against the config, and that every value is finite.
void llama_read_weights(const LlamaConfig& config, const std::string& path,
                        std::vector<float>& params);

// Throws "<what>: tensor '<prefix><name>' holds non-finite values (nan at index I)"
// for the first tensor of `values` (flat layout order) holding NaN or Inf, or with
// `non_negative`, a negative value (AdamW's exp_avg_sq). Every reader of weights and
// optimizer state, and the checkpoint writer, checks through this one function.
void llama_check_finite(const LlamaConfig& config, const std::vector<float>& values,
                        const std::string& what, const std::string& name_prefix = "",
                        bool non_negative = false);

// DIR/config.json; errors name the directory.
LlamaConfig llama_load_config(const std::string& dir);
// Copies DIR's weights (safetensors_model_path: the single file, else the sharded
// index) into the model's parameters (and working weights).
void llama_load_weights(LlamaModel& model, const std::string& dir);
// Both: a ready model on `device` whose working weights are `working` (f32, or
// bf16 for mixed precision).
std::unique_ptr<LlamaModel> llama_load(const std::string& dir, Device device,
                                       DType working = DType::f32);

}  // namespace fanout::models
