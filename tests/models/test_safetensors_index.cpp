// HF's sharded checkpoints (model.safetensors.index.json + shards), written here
// with fanout's own safetensors writer: they load exactly as the single file does
// (through llama_load, --init's safetensors_model_path and the PyTorch reference),
// a single model.safetensors beside an index wins as in HF, and every broken index
// is refused with one line naming the index.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "models/llama_checkpoint.h"
#include "models/safetensors_index.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/paths_util.h"

using namespace fanout;
using namespace fanout::models;
using nlohmann::json;

namespace {
namespace fs = std::filesystem;

LlamaConfig small_config() {
  LlamaConfig c = llama_preset("tiny");
  c.num_hidden_layers = 2;
  return c;
}

std::vector<float> random_params(const LlamaConfig& c, uint64_t seed) {
  LlamaModel m(c, cpu_device(0));
  m.init_random(seed);
  return tensor_to_vector<float>(m.compute_stream(), m.params());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// DIR as HF's save_pretrained shards it: `shards` files, the layout's tensors dealt
// out in order, and the index naming each tensor's shard. Returns the weight_map.
json write_sharded(const LlamaConfig& c, const std::vector<float>& params, const std::string& dir,
                   int shards) {
  fs::create_directories(dir);
  llama_config_save(c, dir + "/config.json");
  LlamaLayout layout(c);
  const auto& all = layout.params();
  json weight_map = json::object();
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<SafetensorsTensor> tensors;
    for (size_t i = s * all.size() / shards; i < (s + 1) * all.size() / shards; ++i) {
      tensors.push_back({all[i].name, DType::f32, all[i].shape, params.data() + all[i].offset});
      weight_map[all[i].name] = name;
    }
    safetensors_write(dir + "/" + name, tensors, {{"format", "pt"}});
  }
  json index = {{"metadata", {{"total_size", layout.total() * 4}}}, {"weight_map", weight_map}};
  write_text(dir + "/" + kSafetensorsIndex, index.dump(2));
  return weight_map;
}

std::string refusal(const std::string& dir) {
  try {
    std::vector<float> out;
    llama_read_weights(small_config(), safetensors_model_path(dir), out);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

void check_refused(const std::string& dir, const std::string& phrase) {
  const std::string msg = refusal(dir);
  INFO(msg);
  CHECK(msg.find(phrase) != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
}
}  // namespace

TEST_CASE("a sharded HF folder loads exactly as the single model.safetensors") {
  std::string dir = test::make_temp_dir("fanout-shards");
  const LlamaConfig c = small_config();
  const std::vector<float> params = random_params(c, 5);
  fs::create_directories(dir + "/single");
  llama_config_save(c, dir + "/single/config.json");
  llama_write_weights(c, params, dir + "/single/model.safetensors");
  for (int shards : {1, 2, 3}) {
    CAPTURE(shards);
    const std::string sharded = dir + "/sharded" + std::to_string(shards);
    write_sharded(c, params, sharded, shards);
    CHECK(safetensors_model_path(sharded) == sharded + "/" + kSafetensorsIndex);
    SafetensorsSet set = SafetensorsSet::open(sharded + "/" + kSafetensorsIndex);
    CHECK(set.file_count() == static_cast<size_t>(shards));
    CHECK(set.entries().size() == LlamaLayout(c).params().size());
    auto a = llama_load(dir + "/single", cpu_device(0));
    auto b = llama_load(sharded, cpu_device(0));
    CHECK(tensor_to_vector<float>(a->compute_stream(), a->params()) == params);
    CHECK(tensor_to_vector<float>(b->compute_stream(), b->params()) == params);
  }
  fs::remove_all(dir);
}

TEST_CASE("the PyTorch reference reads the sharded folder to the same loss as fanout") {
  std::string dir = test::make_temp_dir("fanout-shards");
  const LlamaConfig c = small_config();
  write_sharded(c, random_params(c, 6), dir + "/ckpt", 3);
  const int64_t B = 2, T = 8;
  std::vector<int32_t> ids(B * T), tg(B * T);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = static_cast<int32_t>((i * 37) % 259);
  for (int64_t i = 0; i < B * T; ++i) tg[i] = static_cast<int32_t>((i * 53 + 11) % 259);
  safetensors_write(dir + "/batch.safetensors", {{"input_ids", DType::i32, {B, T}, ids.data()},
                                                 {"targets", DType::i32, {B, T}, tg.data()}});
  const std::string cmd = test::reference_python() + " " + test::reference_script("llama_ref.py") +
                          " forward --checkpoint " + dir + "/ckpt --batch " + dir +
                          "/batch.safetensors --out " + dir + "/out.safetensors >" + dir +
                          "/ref.log 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  SafetensorsFile ref = SafetensorsFile::open(dir + "/out.safetensors");
  float ref_loss = 0;
  ref.read_f32("loss", &ref_loss, 1);
  auto m = llama_load(dir + "/ckpt", cpu_device(0));
  Stream& s = m->compute_stream();
  Tensor stats = Tensor::empty({2}, DType::f32, m->device());
  m->forward_loss(tensor_from_vector(s, ids, {B, T}, DType::i32, m->device()),
                  tensor_from_vector(s, tg, {B, T}, DType::i32, m->device()), stats, kIgnoreIndex);
  const auto st = tensor_to_vector<float>(s, stats);
  CHECK(std::abs(st[0] / st[1] - ref_loss) <= 1e-5 * ref_loss);
  fs::remove_all(dir);
}

TEST_CASE("model.safetensors beside an index is the one loaded, as HF's from_pretrained does") {
  std::string dir = test::make_temp_dir("fanout-shards");
  const LlamaConfig c = small_config();
  write_sharded(c, random_params(c, 7), dir, 2);
  const std::vector<float> single = random_params(c, 8);
  llama_write_weights(c, single, dir + "/model.safetensors");
  CHECK(safetensors_model_path(dir) == dir + "/model.safetensors");
  auto m = llama_load(dir, cpu_device(0));
  CHECK(tensor_to_vector<float>(m->compute_stream(), m->params()) == single);
  fs::remove_all(dir);
}

TEST_CASE("a broken index or shard set is refused in one line naming the index") {
  const std::string dir = test::make_temp_dir("fanout-shards");
  const LlamaConfig c = small_config();
  const std::vector<float> params = random_params(c, 9);
  const std::string index = dir + "/" + kSafetensorsIndex;
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::string shard2 = "model-00002-of-00002.safetensors";
  auto fresh = [&] {
    for (const auto& e : fs::directory_iterator(dir)) fs::remove_all(e.path());
    return write_sharded(c, params, dir, 2);
  };
  auto edit_map = [&](const std::function<void(json&)>& edit) {
    std::ifstream in(index);
    json j = json::parse(in);
    edit(j["weight_map"]);
    write_text(index, j.dump());
  };

  fresh();
  write_text(index, "{\"weight_map\": {");
  check_refused(dir, index + ": not valid JSON");
  write_text(index, "{\"metadata\": {}}");
  check_refused(dir, index + ": has no \"weight_map\" object");
  write_text(index, "[1, 2]");
  check_refused(dir, index + ": expected a JSON object");
  write_text(index, "{\"weight_map\": {}}");
  check_refused(dir, index + ": \"weight_map\" is empty");

  fresh();
  edit_map([](json& m) { m["model.norm.weight"] = 3; });
  check_refused(dir, "weight_map[\"model.norm.weight\"] must be a shard file name, got 3");

  for (const char* escape : {"../model-00002-of-00002.safetensors", "/etc/passwd", "sub/x", ".."}) {
    CAPTURE(escape);
    fresh();
    edit_map([&](json& m) { m["model.norm.weight"] = escape; });
    check_refused(dir, std::string("shard \"") + escape +
                           "\" (for tensor 'model.norm.weight') is not a file name inside the "
                           "checkpoint folder");
  }

  fresh();
  fs::remove(dir + "/" + shard2);
  check_refused(dir, index + ": shard \"" + shard2 + "\" (holding tensor '");
  CHECK(refusal(dir).find("') does not exist") != std::string::npos);

  // A tensor the map puts in shard 1 that lives in shard 2.
  fresh();
  edit_map([&](json& m) { m["model.norm.weight"] = shard1; });
  check_refused(dir, index + ": tensor 'model.norm.weight' is in shard \"" + shard2 +
                         "\", but the weight_map says \"" + shard1 + "\"");

  // A tensor the map names that no shard holds.
  fresh();
  edit_map([&](json& m) { m["model.layers.9.mlp.up_proj.weight"] = shard2; });
  check_refused(dir, index +
                         ": tensor 'model.layers.9.mlp.up_proj.weight' is missing from shard \"" +
                         shard2 + "\"");

  // A shard tensor the map does not list.
  fresh();
  edit_map([&](json& m) { m.erase("model.norm.weight"); });
  check_refused(dir, index + ": shard \"" + shard2 +
                         "\" holds tensor 'model.norm.weight', which the weight_map does not list");

  // The same tensor in both shards.
  fresh();
  {
    const LlamaLayout layout(c);
    const ParamInfo& norm =
        *std::find_if(layout.params().begin(), layout.params().end(),
                      [](const ParamInfo& p) { return p.name == "model.norm.weight"; });
    const ParamInfo& first = layout.params().front();
    safetensors_write(dir + "/" + shard1,
                      {{first.name, DType::f32, first.shape, params.data() + first.offset},
                       {norm.name, DType::f32, norm.shape, params.data() + norm.offset}});
    edit_map([&](json& m) { m[first.name] = shard1; });
  }
  check_refused(dir, index + ": tensor 'model.norm.weight' is in two shards, \"" + shard1 +
                         "\" and \"" + shard2 + "\"");

  // Neither form present.
  fs::remove_all(dir);
  fs::create_directories(dir);
  check_refused(
      dir, "checkpoint '" + dir + "' has no model.safetensors (nor model.safetensors.index.json)");
  fs::remove_all(dir);
}
