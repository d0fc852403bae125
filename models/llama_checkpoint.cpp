#include "models/llama_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <set>
#include <vector>

#include "engine/core/check.h"
#include "models/safetensors.h"
#include "models/safetensors_index.h"

namespace fanout::models {

namespace fs = std::filesystem;

void llama_write_weights(const LlamaConfig& config, const std::vector<float>& params,
                         const std::string& path, bool bf16) {
  LlamaLayout layout(config);
  FANOUT_ASSERT(static_cast<int64_t>(params.size()) == layout.total(), "parameter count");
  std::vector<uint16_t> half;
  if (bf16) {
    half.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) half[i] = float_to_bf16(params[i]);
  }
  std::vector<SafetensorsTensor> tensors;
  for (const ParamInfo& p : layout.params()) {
    const void* data = bf16 ? static_cast<const void*>(half.data() + p.offset)
                            : static_cast<const void*>(params.data() + p.offset);
    tensors.push_back({p.name, bf16 ? DType::bf16 : DType::f32, p.shape, data});
  }
  safetensors_write(path, tensors, {{"format", "pt"}});
}

void llama_save(LlamaModel& model, const std::string& dir, bool bf16) {
  std::vector<float> host(static_cast<size_t>(model.layout().total()));
  tensor_to_host(model.compute_stream(), model.params(), host.data());
  llama_config_save(model.config(), (fs::path(dir) / "config.json").string());
  llama_write_weights(model.config(), host, (fs::path(dir) / "model.safetensors").string(), bf16);
}

LlamaConfig llama_load_config(const std::string& dir) {
  std::error_code ec;
  FANOUT_CHECK(fs::is_directory(dir, ec), "checkpoint '", dir, "' is not a directory");
  fs::path cfg = fs::path(dir) / "config.json";
  FANOUT_CHECK(fs::exists(fs::symlink_status(cfg, ec)), "checkpoint '", dir,
               "' has no config.json");
  return llama_config_load(cfg.string());
}

void llama_check_finite(const LlamaConfig& config, const std::vector<float>& values,
                        const std::string& what, const std::string& name_prefix,
                        bool non_negative) {
  LlamaLayout layout(config);
  FANOUT_ASSERT(static_cast<int64_t>(values.size()) == layout.total(), what, " has ", values.size(),
                " values, the layout ", layout.total());
  for (const ParamInfo& p : layout.params()) {
    const float* v = values.data() + p.offset;
    // One pass with no early exit vectorises; the index is looked for only on failure.
    bool bad = false;
    for (int64_t i = 0; i < p.numel; ++i) bad |= !std::isfinite(v[i]) || (non_negative && v[i] < 0);
    if (!bad) continue;
    int64_t i = 0;
    while (std::isfinite(v[i]) && !(non_negative && v[i] < 0)) ++i;
    FANOUT_CHECK(!std::isfinite(v[i]), what, ": tensor '", name_prefix, p.name,
                 "' holds a negative value (", v[i], " at index ", i, "), which it cannot");
    detail::throw_error(detail::str_cat(what, ": tensor '", name_prefix, p.name,
                                        "' holds non-finite values (", v[i], " at index ", i, ")"));
  }
}

void llama_read_weights(const LlamaConfig& config, const std::string& path,
                        std::vector<float>& params) {
  const SafetensorsSet file = SafetensorsSet::open(path);
  LlamaLayout layout(config);
  std::set<std::string> expected;
  for (const ParamInfo& p : layout.params()) expected.insert(p.name);
  for (const SafetensorsEntry* e : file.entries()) {
    if (expected.count(e->name)) continue;
    // HF may store a tied lm_head, and old checkpoints carry RoPE buffers.
    bool tolerated = (e->name == "lm_head.weight" && config.tie_word_embeddings) ||
                     e->name.find("rotary_emb.inv_freq") != std::string::npos;
    FANOUT_CHECK(tolerated, path, ": unexpected tensor ", e->name,
                 " (not part of this config's model)");
  }
  params.assign(static_cast<size_t>(layout.total()), 0.0f);
  for (const ParamInfo& p : layout.params()) {
    const SafetensorsEntry* e = file.find(p.name);
    FANOUT_CHECK(e != nullptr, path, ": missing tensor ", p.name);
    FANOUT_CHECK(e->shape == p.shape, path, ": tensor ", p.name, " has shape ", shape_str(e->shape),
                 ", expected ", shape_str(p.shape), " for this config");
    file.read_f32(p.name, params.data() + p.offset, p.numel);
  }
  llama_check_finite(config, params, path);
}

void llama_load_weights(LlamaModel& model, const std::string& dir) {
  std::vector<float> host;
  llama_read_weights(model.config(), safetensors_model_path(dir), host);
  tensor_upload(model.compute_stream(), model.params(), host.data());
  model.params_to_working(0, model.params().numel());
}

std::unique_ptr<LlamaModel> llama_load(const std::string& dir, Device device, DType working) {
  auto model = std::make_unique<LlamaModel>(llama_load_config(dir), device, "", working);
  llama_load_weights(*model, dir);
  return model;
}

}  // namespace fanout::models
