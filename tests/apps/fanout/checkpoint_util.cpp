#include "tests/apps/fanout/checkpoint_util.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/llama_checkpoint.h"
#include "models/safetensors.h"
#include "tests/apps/fanout/cli_runner.h"

namespace fanout::test {

models::LlamaConfig cli_test_config() {
  models::LlamaConfig c = models::llama_preset("tiny");
  c.num_hidden_layers = 1;
  c.max_position_embeddings = 64;
  return c;
}

void checkpoint_write(const std::string& dir, const models::LlamaConfig& config, uint64_t seed) {
  models::LlamaModel model(config, cpu_device(0));
  model.init_random(seed);
  models::llama_save(model, dir);
}

std::vector<HostTensor> weights_read(const std::string& dir) {
  auto file = models::SafetensorsFile::open(dir + "/model.safetensors");
  std::vector<HostTensor> out;
  for (const models::SafetensorsEntry& e : file.entries()) {
    HostTensor t{e.name, e.shape, std::vector<float>(static_cast<size_t>(shape_numel(e.shape)))};
    file.read_f32(e.name, t.data.data(), static_cast<int64_t>(t.data.size()));
    out.push_back(std::move(t));
  }
  return out;
}

void weights_write(const std::string& dir, const std::vector<HostTensor>& tensors) {
  std::vector<models::SafetensorsTensor> st;
  for (const HostTensor& t : tensors) st.push_back({t.name, DType::f32, t.shape, t.data.data()});
  models::safetensors_write(dir + "/model.safetensors", st, {{"format", "pt"}});
}

std::string file_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void file_write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

nlohmann::json last_json_line(const std::string& out) {
  std::istringstream in(out);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) last = line;
  }
  return nlohmann::json::parse(last, nullptr, false);
}

}  // namespace fanout::test
