#pragma once
// A model's weights as one set of tensors, whether HF saved them as a single
// model.safetensors or sharded: model.safetensors.index.json ({"metadata": {...},
// "weight_map": {tensor name: shard file name}}) beside model-00001-of-0000N.safetensors
// and the rest. Opening an index checks it against the shards (every shard exists
// inside the folder, every tensor is in the shard the map names and in no other).

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/safetensors.h"

namespace fanout::models {

constexpr const char* kSafetensorsSingle = "model.safetensors";
constexpr const char* kSafetensorsIndex = "model.safetensors.index.json";

class SafetensorsSet {
 public:
  // `path`: a .safetensors file, or an index (a name ending ".index.json") whose
  // shards lie in the same folder. Throws fanout::Error "<path>: <reason>".
  static SafetensorsSet open(const std::string& path);

  const std::string& path() const { return path_; }
  // Every tensor of every file, file by file (index: shards in name order).
  std::vector<const SafetensorsEntry*> entries() const;
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr if absent
  // Tensor `name` converted to f32 into out[numel] (SafetensorsFile::read_f32).
  void read_f32(const std::string& name, float* out, int64_t numel) const;
  size_t file_count() const { return files_.size(); }

 private:
  SafetensorsSet() = default;

  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, size_t> file_of_;  // tensor name -> index into files_
};

// The weights of checkpoint DIR as HF's from_pretrained picks them:
// DIR/model.safetensors when it exists (it wins over an index beside it, as in HF),
// else DIR/model.safetensors.index.json; throws "checkpoint 'DIR' has no
// model.safetensors (nor model.safetensors.index.json)" when neither exists.
std::string safetensors_model_path(const std::string& dir);

}  // namespace fanout::models
