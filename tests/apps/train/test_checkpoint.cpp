// Training checkpoints: bit-exact round trips (untied and tied), overwriting, the
// directory read as a plain HF model, one damaged checkpoint per validation,
// checkpoint_find_last, and crashes: a leftover temporary directory, and a writer
// killed with SIGKILL at random moments while the previous checkpoint must survive.

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "apps/train/checkpoint.h"
#include "engine/core/check.h"
#include "models/llama_checkpoint.h"
#include "models/llama_layout.h"
#include "models/safetensors.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/input_util.h"

using namespace fanout;
using namespace fanout::train;
namespace fs = std::filesystem;

using fanout::test::error_of;
using fanout::test::TempDir;

namespace {

// A fresh directory, removed with its contents at scope exit.

models::LlamaConfig test_config(bool tied, int64_t layers = 1) {
  models::LlamaConfig c = models::llama_preset("tiny");
  c.num_hidden_layers = layers;
  c.tie_word_embeddings = tied;
  return c;
}

// Random parameters and moments (exp_avg_sq non-negative) and a state whose flags
// hold every JSON kind, from a fixed seed.
Checkpoint test_checkpoint(const models::LlamaConfig& config, uint32_t seed) {
  Checkpoint c;
  c.config = config;
  const size_t n = static_cast<size_t>(models::LlamaLayout(config).total());
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  c.params.resize(n);
  c.exp_avg.resize(n);
  c.exp_avg_sq.resize(n);
  for (size_t i = 0; i < n; ++i) {
    c.params[i] = normal(rng);
    c.exp_avg[i] = normal(rng) * 1e-3f;
    c.exp_avg_sq[i] = std::abs(normal(rng)) * 1e-7f;
  }
  c.state.step = 1000 + seed;
  c.state.data = {3, 17 + seed};
  c.state.seed = 0xfedcba9876543210ull;  // above 2^63
  c.state.tokens_seen = 123456789012 + seed;
  c.state.flags = {{"lr", 3e-4},      {"min_lr", 0.1 / 3.0},  {"schedule", "cosine"},
                   {"batch_size", 8}, {"seq_len", 64},        {"shuffle", true},
                   {"clip", nullptr}, {"betas", {0.9, 0.95}}, {"extra", {{"note", "é"}}}};
  return c;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_same(const Checkpoint& got, const Checkpoint& want) {
  CHECK(models::llama_config_to_json(got.config) == models::llama_config_to_json(want.config));
  CHECK(bits_equal(got.params, want.params));
  CHECK(bits_equal(got.exp_avg, want.exp_avg));
  CHECK(bits_equal(got.exp_avg_sq, want.exp_avg_sq));
  CHECK(got.state.step == want.state.step);
  CHECK(got.state.data.epoch == want.state.data.epoch);
  CHECK(got.state.data.index == want.state.data.index);
  CHECK(got.state.seed == want.state.seed);
  CHECK(got.state.tokens_seen == want.state.tokens_seen);
  CHECK(got.state.flags == want.state.flags);
}

std::string file_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void file_write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Every tensor of a safetensors file, as f32.
struct NamedTensor {
  std::string name;
  Shape shape;
  std::vector<float> data;
};

std::vector<NamedTensor> tensors_read(const std::string& path) {
  models::SafetensorsFile file = models::SafetensorsFile::open(path);
  std::vector<NamedTensor> out;
  for (const models::SafetensorsEntry& e : file.entries()) {
    NamedTensor t{e.name, e.shape, std::vector<float>(static_cast<size_t>(shape_numel(e.shape)))};
    file.read_f32(e.name, t.data.data(), static_cast<int64_t>(t.data.size()));
    out.push_back(std::move(t));
  }
  return out;
}

void tensors_write(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::vector<models::SafetensorsTensor> st;
  for (const NamedTensor& t : tensors) st.push_back({t.name, DType::f32, t.shape, t.data.data()});
  models::safetensors_write(path, st, {{"format", "fanout-adamw"}});
}

// Names in `parent` other than `keep`.
std::vector<std::string> other_entries(const fs::path& parent, const std::string& keep) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(parent)) {
    if (e.path().filename() != keep) names.push_back(e.path().filename().string());
  }
  return names;
}

}  // namespace

// --- round trips -------------------------------------------------------------------

TEST_CASE("checkpoint round trip is bit-exact for untied and tied models") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    TempDir tmp;
    const Checkpoint want = test_checkpoint(test_config(tied), tied ? 2 : 1);
    checkpoint_write(tmp / "step-000001", want);
    check_same(checkpoint_read(tmp / "step-000001"), want);
    // A tied model stores no lm_head, nor moments for one.
    const auto optimizer = tensors_read(tmp / "step-000001/optimizer.safetensors");
    const bool has_lm_head =
        std::any_of(optimizer.begin(), optimizer.end(),
                    [](const NamedTensor& t) { return t.name == "exp_avg.lm_head.weight"; });
    CHECK(has_lm_head == !tied);
    CHECK(optimizer.size() == 2 * models::LlamaLayout(want.config).params().size());
    CHECK(models::SafetensorsFile::open(tmp / "step-000001/optimizer.safetensors")
              .metadata()
              .at("format") == "fanout-adamw");
    CHECK(other_entries(fs::path(tmp.path), "step-000001").empty());
  }
}

TEST_CASE("checkpoint overwrite replaces the previous checkpoint") {
  TempDir tmp;
  const std::string dir = tmp / "final";
  checkpoint_write(dir, test_checkpoint(test_config(false), 1));
  const Checkpoint second = test_checkpoint(test_config(true), 2);
  checkpoint_write(dir + "/", second);  // a trailing separator names the same directory
  check_same(checkpoint_read(dir), second);
  CHECK(other_entries(fs::path(tmp.path), "final").empty());  // no temporary or old copy left
}

TEST_CASE("checkpoint directory is a plain HF model directory") {
  TempDir tmp;
  const std::string dir = tmp / "step-000007";
  const Checkpoint want = test_checkpoint(test_config(false), 7);
  checkpoint_write(dir, want);
  const models::LlamaConfig config = models::llama_load_config(dir);
  CHECK(models::llama_config_to_json(config) == models::llama_config_to_json(want.config));
  std::vector<float> params;
  models::llama_read_weights(config, dir + "/model.safetensors", params);
  CHECK(bits_equal(params, want.params));
  const auto config_json = nlohmann::json::parse(file_read(dir + "/config.json"));
  CHECK(config_json.at("architectures") == nlohmann::json::array({"LlamaForCausalLM"}));
  const auto state = nlohmann::json::parse(file_read(dir + "/trainer_state.json"));
  CHECK(state.at("step") == want.state.step);
  CHECK(state.at("data").at("index") == want.state.data.index);
}

// --- validation ----------------------------------------------------------------------

TEST_CASE("checkpoint read names the damaged part of a checkpoint") {
  TempDir tmp;
  const std::string dir = tmp / "step-000003";
  checkpoint_write(dir, test_checkpoint(test_config(false), 3));
  const std::string state_path = dir + "/trainer_state.json";
  const std::string model_path = dir + "/model.safetensors";
  const std::string optimizer_path = dir + "/optimizer.safetensors";
  const nlohmann::json state = nlohmann::json::parse(file_read(state_path));
  auto expect = [&](const std::string& read_dir, const std::string& phrase) {
    const std::string msg = error_of([&] { checkpoint_read(read_dir); });
    CAPTURE(msg);
    CHECK(msg.rfind("checkpoint " + read_dir + ": ", 0) == 0);
    CHECK(msg.find(phrase) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  };

  SUBCASE("missing directory") {
    expect(tmp / "step-000004", "no such directory");
  }
  SUBCASE("missing trainer_state.json") {
    fs::remove(state_path);
    expect(dir, "missing trainer_state.json");
  }
  SUBCASE("missing optimizer.safetensors") {
    fs::remove(optimizer_path);
    expect(dir, "missing optimizer.safetensors");
  }
  SUBCASE("truncated trainer_state.json") {
    const std::string text = file_read(state_path);
    file_write(state_path, text.substr(0, text.size() / 2));
    expect(dir, "trainer_state.json: not valid JSON");
  }
  SUBCASE("trainer_state.json missing a key") {
    nlohmann::json j = state;
    j["data"].erase("index");
    file_write(state_path, j.dump());
    expect(dir, "trainer_state.json: missing key \"data.index\"");
  }
  SUBCASE("trainer_state.json with a wrong type") {
    nlohmann::json j = state;
    j["tokens_seen"] = "many";
    file_write(state_path, j.dump());
    expect(dir, "\"tokens_seen\" must be an integer");
  }
  SUBCASE("trainer_state.json with flags that are not an object") {
    nlohmann::json j = state;
    j["flags"] = nlohmann::json::array();
    file_write(state_path, j.dump());
    expect(dir, "\"flags\" must be an object");
  }
  SUBCASE("negative step") {
    nlohmann::json j = state;
    j["step"] = -5;
    file_write(state_path, j.dump());
    expect(dir, "\"step\" is negative (-5)");
  }
  SUBCASE("unknown trainer_state.json version") {
    nlohmann::json j = state;
    j["version"] = 2;
    file_write(state_path, j.dump());
    expect(dir, "version 2 is not supported");
  }
  SUBCASE("bad config.json") {
    nlohmann::json j = nlohmann::json::parse(file_read(dir + "/config.json"));
    j["hidden_size"] = -1;
    file_write(dir + "/config.json", j.dump());
    expect(dir, "config.json: hidden_size must be positive");
  }
  SUBCASE("truncated model.safetensors") {
    const std::string bytes = file_read(model_path);
    file_write(model_path, bytes.substr(0, bytes.size() - 1000));
    expect(dir, "model.safetensors: ");
    expect(dir, "past the end");
  }
  SUBCASE("optimizer.safetensors missing a tensor") {
    auto tensors = tensors_read(optimizer_path);
    std::erase_if(tensors,
                  [](const NamedTensor& t) { return t.name == "exp_avg_sq.model.norm.weight"; });
    tensors_write(optimizer_path, tensors);
    expect(dir, "optimizer.safetensors: missing tensor 'exp_avg_sq.model.norm.weight'");
  }
  SUBCASE("optimizer tensor with the wrong shape") {
    auto tensors = tensors_read(optimizer_path);
    for (NamedTensor& t : tensors) {
      if (t.name == "exp_avg.model.layers.0.mlp.up_proj.weight") std::swap(t.shape[0], t.shape[1]);
    }
    tensors_write(optimizer_path, tensors);
    expect(dir, "tensor 'exp_avg.model.layers.0.mlp.up_proj.weight' has shape [128, 384]");
  }
  SUBCASE("optimizer.safetensors with an extra tensor") {
    auto tensors = tensors_read(optimizer_path);
    tensors.push_back({"exp_avg.model.layers.1.input_layernorm.weight", {128}, {}});
    tensors.back().data.assign(128, 0.0f);
    tensors_write(optimizer_path, tensors);
    expect(dir, "unexpected tensor 'exp_avg.model.layers.1.input_layernorm.weight'");
  }
  SUBCASE("optimizer.safetensors that is not an AdamW state") {
    file_write(optimizer_path, file_read(model_path));
    expect(dir, "not a fanout AdamW state");
  }
}

TEST_CASE("checkpoint write refuses bad input and foreign directories") {
  TempDir tmp;
  Checkpoint ckpt = test_checkpoint(test_config(false), 4);

  SUBCASE("a directory with other files is not replaced") {
    fs::create_directory(tmp / "run");
    file_write(tmp / "run/notes.txt", "keep me");
    const std::string msg = error_of([&] { checkpoint_write(tmp / "run", ckpt); });
    CHECK(msg.find("holds 'notes.txt', which is not a checkpoint file") != std::string::npos);
    CHECK(file_read(tmp / "run/notes.txt") == "keep me");
  }
  SUBCASE("moments of the wrong size") {
    ckpt.exp_avg_sq.pop_back();
    const std::string msg = error_of([&] { checkpoint_write(tmp / "step-000004", ckpt); });
    CHECK(msg.find("exp_avg_sq has") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "step-000004"));
  }
  SUBCASE("negative step") {
    ckpt.state.step = -1;
    const std::string msg = error_of([&] { checkpoint_write(tmp / "step-000004", ckpt); });
    CHECK(msg.find("step is negative") != std::string::npos);
  }
  CHECK(other_entries(fs::path(tmp.path), "run").empty());  // nothing half-written left behind
}

// --- checkpoint_find_last ---------------------------------------------------------------

TEST_CASE("checkpoint_find_last picks the highest complete step") {
  CHECK(checkpoint_step_name(123) == "step-000123");
  CHECK(checkpoint_step_name(0) == "step-000000");
  CHECK(checkpoint_step_name(1234567) == "step-1234567");

  TempDir tmp;
  const std::string out = tmp.path;
  CHECK(error_of([&] { checkpoint_find_last(out); }).find("no checkpoint found in " + out) == 0);
  CHECK(error_of([&] { checkpoint_find_last(tmp / "absent"); }).find("no checkpoint found in") ==
        0);

  Checkpoint ckpt = test_checkpoint(test_config(true), 5);
  for (int64_t step : {2, 10, 9}) {
    ckpt.state.step = step;
    checkpoint_write(tmp / checkpoint_step_name(step), ckpt);
  }
  // Higher steps that do not count: a temporary directory and an incomplete one.
  fs::copy(tmp / "step-000010", tmp / "step-000050.tmp-999999999-0", fs::copy_options::recursive);
  fs::copy(tmp / "step-000010", tmp / "step-000040", fs::copy_options::recursive);
  fs::remove(tmp / "step-000040/trainer_state.json");
  fs::create_directory(tmp / "step-00009x");
  CHECK(checkpoint_find_last(out) == tmp / "step-000010");

  ckpt.state.step = 7;
  checkpoint_write(tmp / "final", ckpt);
  CHECK(checkpoint_find_last(out) == tmp / "step-000010");
  ckpt.state.step = 10;
  checkpoint_write(tmp / "final", ckpt);
  CHECK(checkpoint_find_last(out) == tmp / "final");  // final wins a tie
  ckpt.state.step = 12;
  checkpoint_write(tmp / "final", ckpt);
  CHECK(checkpoint_find_last(out + "/") == tmp / "final");
}

// --- crashes ------------------------------------------------------------------------

TEST_CASE("checkpoint survives a crash that left a temporary directory") {
  TempDir tmp;
  const std::string dir = tmp / "step-000020";
  const Checkpoint first = test_checkpoint(test_config(false), 20);
  checkpoint_write(dir, first);

  // A writer that died (no such pid) after part of its files, and one that is still alive.
  const std::string dead = dir + ".tmp-999999999-3";
  const std::string alive = dir + ".tmp-" + std::to_string(getppid()) + "-0";
  for (const std::string& t : {dead, alive}) {
    fs::create_directory(t);
    fs::copy_file(dir + "/config.json", t + "/config.json");
    const std::string model = file_read(dir + "/model.safetensors");
    file_write(t + "/model.safetensors", model.substr(0, model.size() / 3));
  }
  check_same(checkpoint_read(dir), first);
  CHECK(checkpoint_find_last(tmp.path) == dir);

  const Checkpoint second = test_checkpoint(test_config(false), 21);
  checkpoint_write(dir, second);
  check_same(checkpoint_read(dir), second);
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(alive));  // another live process may still be writing through it
  fs::remove_all(alive);
  CHECK(other_entries(fs::path(tmp.path), "step-000020").empty());
}

// Where the filesystem cannot swap two directories, a replace renames the old one
// aside first; a crash right then leaves only that copy (Note [Atomic checkpoint directory]).
TEST_CASE("checkpoint read falls back to the copy an interrupted replace renamed aside") {
  TempDir tmp;
  const std::string dir = tmp / "step-000030";
  const Checkpoint first = test_checkpoint(test_config(true), 30);
  checkpoint_write(dir, first);
  fs::rename(dir, dir + ".old-999999999-0");
  check_same(checkpoint_read(dir), first);
  CHECK(checkpoint_find_last(tmp.path) == dir);

  const Checkpoint second = test_checkpoint(test_config(true), 31);
  checkpoint_write(dir, second);
  check_same(checkpoint_read(dir), second);
  CHECK(other_entries(fs::path(tmp.path), "step-000030").empty());
}

namespace {

// A checkpoint whose every value derives from `step`, so a mix of two writes shows.
void stamp(Checkpoint& c, int64_t step) {
  c.state.step = step;
  c.state.tokens_seen = step * 100;
  c.state.flags["stamp"] = step;
  std::fill(c.params.begin(), c.params.end(), static_cast<float>(step));
  std::fill(c.exp_avg.begin(), c.exp_avg.end(), static_cast<float>(step) + 0.5f);
  std::fill(c.exp_avg_sq.begin(), c.exp_avg_sq.end(), static_cast<float>(step) + 0.25f);
}

bool stamped(const Checkpoint& c, int64_t step) {
  auto all = [](const std::vector<float>& v, float x) {
    return std::all_of(v.begin(), v.end(), [x](float y) { return y == x; });
  };
  return c.state.tokens_seen == step * 100 && c.state.flags.value("stamp", -1) == step &&
         all(c.params, static_cast<float>(step)) &&
         all(c.exp_avg, static_cast<float>(step) + 0.5f) &&
         all(c.exp_avg_sq, static_cast<float>(step) + 0.25f);
}

}  // namespace

TEST_CASE("checkpoint write killed at random moments leaves a complete checkpoint") {
  TempDir tmp;
  const std::string dir = tmp / "final";
  Checkpoint ckpt = test_checkpoint(test_config(false, 2), 1);  // about 4.6 MB of f32
  stamp(ckpt, 1);
  const auto t0 = std::chrono::steady_clock::now();
  checkpoint_write(dir, ckpt);
  const double write_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();

  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> fraction(0.0, 4.0);
  int64_t last_step = 1;
  for (int round = 0; round < 8; ++round) {
    const int64_t first_step = 1000 * (round + 1);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child rewrites the checkpoint until it is killed; it never returns to doctest.
      try {
        for (int64_t step = first_step;; ++step) {
          stamp(ckpt, step);
          checkpoint_write(dir, ckpt);
        }
      } catch (...) {
        _exit(1);
      }
    }
    const auto delay = std::chrono::microseconds(static_cast<int64_t>(fraction(rng) * write_us));
    std::this_thread::sleep_for(delay);
    REQUIRE(kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CAPTURE(round);
    CAPTURE(delay.count());
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));  // not an error exit

    const Checkpoint got = checkpoint_read(dir);
    const int64_t step = got.state.step;
    CAPTURE(step);
    CHECK((step == last_step || step >= first_step));
    CHECK(stamped(got, step));
    CHECK(checkpoint_find_last(tmp.path) == dir);
    last_step = step;
  }
  // The next write clears what the killed writers left behind.
  stamp(ckpt, 99999);
  checkpoint_write(dir, ckpt);
  CHECK(stamped(checkpoint_read(dir), 99999));
  CHECK(other_entries(fs::path(tmp.path), "final").empty());
}

// --- issue 17: non-finite state and non-regular files --------------------------

TEST_CASE("checkpoint write refuses non-finite params or moments and writes nothing") {
  TempDir tmp;
  const models::LlamaLayout layout(test_config(false));
  const int64_t norm = layout.find("model.norm.weight")->offset;
  const int64_t up = layout.find("model.layers.0.mlp.up_proj.weight")->offset;
  struct Case {
    std::vector<float> Checkpoint::*values;
    int64_t at;
    float value;
    const char* phrase;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const Case& c :
       {Case{&Checkpoint::params, norm + 5, nan,
             "tensor 'model.norm.weight' holds non-finite values (nan at index 5)"},
        Case{&Checkpoint::exp_avg, up, -inf,
             "tensor 'exp_avg.model.layers.0.mlp.up_proj.weight' holds non-finite values (-inf"},
        Case{&Checkpoint::exp_avg_sq, up + 7, -1e-9f,
             "tensor 'exp_avg_sq.model.layers.0.mlp.up_proj.weight' holds a negative value"}}) {
    CAPTURE(c.phrase);
    Checkpoint ckpt = test_checkpoint(test_config(false), 6);
    (ckpt.*c.values)[static_cast<size_t>(c.at)] = c.value;
    const std::string msg = error_of([&] { checkpoint_write(tmp / "step-000006", ckpt); });
    CHECK(msg.rfind("checkpoint " + tmp / "step-000006: refusing to write it: ", 0) == 0);
    CHECK(msg.find(c.phrase) != std::string::npos);
    CHECK(fs::is_empty(tmp.path));  // not even a temporary directory
  }
}

TEST_CASE("checkpoint read refuses non-finite weights or moments naming the tensor") {
  TempDir tmp;
  const std::string dir = tmp / "step-000007";
  const models::LlamaLayout layout(test_config(false));
  struct Case {
    const char* file;
    const char* tensor;
    float value;
    const char* phrase;
  };
  for (const Case& c :
       {Case{"model.safetensors", "model.layers.0.self_attn.k_proj.weight",
             std::numeric_limits<float>::infinity(),
             "model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' holds "
             "non-finite values (inf at index 3)"},
        Case{"optimizer.safetensors", "exp_avg.lm_head.weight",
             std::numeric_limits<float>::quiet_NaN(),
             "optimizer.safetensors: tensor 'exp_avg.lm_head.weight' holds non-finite values"},
        Case{"optimizer.safetensors", "exp_avg_sq.model.embed_tokens.weight", -0.5f,
             "optimizer.safetensors: tensor 'exp_avg_sq.model.embed_tokens.weight' holds a "
             "negative value (-0.5 at index 3)"}}) {
    CAPTURE(c.phrase);
    checkpoint_write(dir, test_checkpoint(test_config(false), 7));
    const std::string path = dir + "/" + c.file;
    auto tensors = tensors_read(path);
    for (NamedTensor& t : tensors) {
      if (t.name == c.tensor) t.data[3] = c.value;
    }
    models::safetensors_write(
        path,
        [&] {
          std::vector<models::SafetensorsTensor> st;
          for (const NamedTensor& t : tensors)
            st.push_back({t.name, DType::f32, t.shape, t.data.data()});
          return st;
        }(),
        {{"format", std::string(c.file) == "model.safetensors" ? "pt" : "fanout-adamw"}});
    const std::string msg = error_of([&] { checkpoint_read(dir); });
    CHECK(msg.rfind("checkpoint " + dir + ": ", 0) == 0);
    CHECK(msg.find(c.phrase) != std::string::npos);
  }
}

TEST_CASE("checkpoint read refuses a FIFO for any of its files without blocking") {
  TempDir tmp;
  const std::string dir = tmp / "step-000008";
  for (const char* file :
       {"trainer_state.json", "config.json", "model.safetensors", "optimizer.safetensors"}) {
    CAPTURE(file);
    checkpoint_write(dir, test_checkpoint(test_config(false), 8));
    fs::remove(dir + "/" + file);
    fanout::test::Fifo fifo(dir + "/" + file);
    CHECK(error_of([&] { checkpoint_read(dir); }) ==
          "checkpoint " + dir + ": " + file + ": is a FIFO, not a regular file");
  }
}

TEST_CASE("checkpoint read refuses a model too large to train before reading weights") {
  TempDir tmp;
  const std::string dir = tmp / "step-000009";
  checkpoint_write(dir, test_checkpoint(test_config(false), 9));
  nlohmann::json j = nlohmann::json::parse(file_read(dir + "/config.json"));
  j["num_hidden_layers"] = 1'000'000'000;  // 2e14 parameters
  file_write(dir + "/config.json", j.dump());
  const std::string msg = error_of([&] { checkpoint_read(dir); });
  CHECK(msg.rfind("checkpoint " + dir + ": config.json: the model has ", 0) == 0);
  CHECK(msg.find("num_hidden_layers 1000000000 x 196864 per layer") != std::string::npos);
}
