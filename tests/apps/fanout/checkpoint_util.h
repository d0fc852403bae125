#pragma once
// Checkpoints and files for the CLI tests: a tiny random Llama saved as HF writes
// it, its weights read back and rewritten (to break them one way at a time),
// whole-file reads and writes, and the JSON object on stdout's last line.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/llama_config.h"
#include "tests/apps/fanout/cli_runner.h"  // TempDir

namespace fanout::test {

// The tiny preset with one layer and 64 positions: quick to save and to run.
models::LlamaConfig cli_test_config();
// DIR/config.json and DIR/model.safetensors of a model initialised from `seed`.
void checkpoint_write(const std::string& dir, const models::LlamaConfig& config, uint64_t seed = 1);

// One tensor of DIR/model.safetensors, as f32 on the host.
struct HostTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};
std::vector<HostTensor> weights_read(const std::string& dir);
void weights_write(const std::string& dir, const std::vector<HostTensor>& tensors);

std::string file_read(const std::string& path);
void file_write(const std::string& path, const std::string& bytes);

// The last non-empty line of `out` parsed as JSON (discarded value if it is not).
nlohmann::json last_json_line(const std::string& out);

}  // namespace fanout::test
