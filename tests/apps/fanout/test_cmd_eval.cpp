// `fanout eval` through the real binary: the loss and token count of a good
// checkpoint (the same on one device as on two), then one broken input at a time
// (checkpoint directory, config.json, model.safetensors, data file, flags), each
// a non-zero exit with exactly one line on stderr saying what is wrong.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "apps/train/token_file.h"
#include "engine/core/cuda_runtime.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

constexpr const char* kText =
    "The quick brown fox jumps over the lazy dog.\n"
    "Pack my box with five dozen liquor jugs.\n"
    "\n"
    "How vexingly quick daft zebras jump!\n"
    "Sphinx of black quartz, judge my vow.\n"
    "\n"
    "The five boxing wizards jump quickly.\n";

// A good checkpoint (vocab 259, 64 positions), a text file and a .bin file.
struct EvalFiles {
  TempDir dir{"fanout-eval"};
  std::string ckpt = dir / "ckpt", text = dir / "data.txt", bin = dir / "data.bin";
  std::vector<int32_t> bin_tokens;
  EvalFiles() {
    fs::create_directory(ckpt);
    checkpoint_write(ckpt, cli_test_config());
    file_write(text, kText);
    for (int i = 0; i < 200; ++i) bin_tokens.push_back((i * 37 + 11) % 259);
    train::token_file_write_bin(bin, bin_tokens);
  }
};

// eval with B = 2, T = 16 unless `flags` gives its own.
CliResult eval(const std::string& ckpt, const std::string& data,
               std::vector<std::string> flags = {"--batch-size", "2", "--seq-len", "16"}) {
  std::vector<std::string> args = {"eval", "--checkpoint", ckpt, "--data", data};
  args.insert(args.end(), flags.begin(), flags.end());
  return run_fanout(args);
}

// A non-zero exit, exactly one non-empty stderr line, and `phrase` in it.
void check_fails(const CliResult& r, const std::string& phrase) {
  INFO("rc " << r.rc << " stderr: " << r.err);
  CHECK(r.rc != 0);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find("fanout: error: ") == 0);
  CHECK(r.err.find(phrase) != std::string::npos);
}

nlohmann::json eval_json(const std::string& ckpt, const std::string& data,
                         std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {"--batch-size", "2", "--seq-len", "16", "--json"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  CliResult r = eval(ckpt, data, flags);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  nlohmann::json j = last_json_line(r.out);
  REQUIRE(j.is_object());
  REQUIRE(j.contains("loss"));
  REQUIRE(j.contains("tokens"));
  REQUIRE(j.contains("batches"));
  return j;
}

// Edits config.json as JSON.
template <typename Edit>
void config_edit(const std::string& ckpt, Edit edit) {
  nlohmann::json j = nlohmann::json::parse(file_read(ckpt + "/config.json"));
  edit(j);
  file_write(ckpt + "/config.json", j.dump(2));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
  return s;
}
}  // namespace

// --- a good checkpoint --------------------------------------------------------

TEST_CASE("eval reports a finite positive loss over batches times B times T tokens") {
  EvalFiles f;
  for (const std::string& data : {f.text, f.bin}) {
    CAPTURE(data);
    int64_t n = static_cast<int64_t>(train::token_file_load(data).tokens.size());
    nlohmann::json j = eval_json(f.ckpt, data);
    double loss = j["loss"].get<double>();
    CHECK(std::isfinite(loss));
    CHECK(loss > 0);
    // A random init predicts nearly uniformly over 259 ids.
    CHECK(std::abs(loss - std::log(259.0)) < 0.5);
    CHECK(j["batches"].get<int64_t>() == (n - 1) / 32);
    CHECK(j["tokens"].get<int64_t>() == j["batches"].get<int64_t>() * 2 * 16);
    CHECK(j["perplexity"].get<double>() == doctest::Approx(std::exp(loss)).epsilon(1e-9));
  }
}

TEST_CASE("eval on two cpu devices gives the loss of one device") {
  EvalFiles f;
  nlohmann::json one = eval_json(f.ckpt, f.bin, {"--devices", "cpu:0"});
  nlohmann::json two = eval_json(f.ckpt, f.bin, {"--devices", "cpu:0,cpu:1"});
  double a = one["loss"].get<double>(), b = two["loss"].get<double>();
  CHECK(std::abs(a - b) <= 1e-5 * std::abs(a));
  CHECK(one["tokens"] == two["tokens"]);
}

TEST_CASE("eval --max-batches limits the batches evaluated") {
  EvalFiles f;
  int64_t all = (static_cast<int64_t>(f.bin_tokens.size()) - 1) / 32;  // 6
  for (int64_t max : {int64_t{1}, int64_t{2}, all + 5}) {
    CAPTURE(max);
    nlohmann::json j = eval_json(f.ckpt, f.bin, {"--max-batches", std::to_string(max)});
    CHECK(j["batches"].get<int64_t>() == std::min(max, all));
    CHECK(j["tokens"].get<int64_t>() == std::min(max, all) * 32);
  }
}

// --- a broken checkpoint: config.json -----------------------------------------

TEST_CASE("eval names a checkpoint directory that does not exist") {
  EvalFiles f;
  check_fails(eval(f.dir / "no-such-ckpt", f.bin), "is not a directory");
}

TEST_CASE("eval names a checkpoint without config.json") {
  EvalFiles f;
  fs::remove(f.ckpt + "/config.json");
  check_fails(eval(f.ckpt, f.bin), "has no config.json");
}

TEST_CASE("eval refuses a config.json that is not valid JSON") {
  EvalFiles f;
  file_write(f.ckpt + "/config.json", "{\"vocab_size\": 259,");
  check_fails(eval(f.ckpt, f.bin), "not valid JSON");
}

TEST_CASE("eval refuses a config with linear rope scaling") {
  EvalFiles f;
  config_edit(f.ckpt, [](nlohmann::json& j) {
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  });
  check_fails(eval(f.ckpt, f.bin), "rope_scaling is not supported");
}

TEST_CASE("eval names a required config key that is missing") {
  EvalFiles f;
  config_edit(f.ckpt, [](nlohmann::json& j) { j.erase("hidden_size"); });
  check_fails(eval(f.ckpt, f.bin), "missing required key \"hidden_size\"");
}

// --- a broken checkpoint: model.safetensors -----------------------------------

TEST_CASE("eval names a checkpoint without model.safetensors") {
  EvalFiles f;
  fs::remove(f.ckpt + "/model.safetensors");
  check_fails(eval(f.ckpt, f.bin), "has no model.safetensors");
}

TEST_CASE("eval refuses a truncated model.safetensors") {
  EvalFiles f;
  std::string path = f.ckpt + "/model.safetensors";
  std::string bytes = file_read(path);
  file_write(path, bytes.substr(0, bytes.size() / 2));
  check_fails(eval(f.ckpt, f.bin), "run past the end of the data");
}

TEST_CASE("eval refuses a safetensors header length past the end of the file") {
  EvalFiles f;
  std::string path = f.ckpt + "/model.safetensors";
  std::string bytes = file_read(path);
  std::string good = bytes;
  file_write(path, le64(bytes.size()) + bytes.substr(8));  // one past the end
  check_fails(eval(f.ckpt, f.bin), "runs past the end of the file");
  file_write(path, le64(uint64_t{1} << 62) + good.substr(8));  // huge
  check_fails(eval(f.ckpt, f.bin), "exceeds the 100 MB limit");
}

TEST_CASE("eval refuses safetensors tensors with overlapping data_offsets") {
  EvalFiles f;
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  file_write(f.ckpt + "/model.safetensors", le64(header.size()) + header + std::string(12, '\0'));
  check_fails(eval(f.ckpt, f.bin), "overlap");
}

TEST_CASE("eval names a tensor missing from model.safetensors") {
  EvalFiles f;
  std::vector<HostTensor> w = weights_read(f.ckpt);
  std::erase_if(w, [](const HostTensor& t) { return t.name == "model.norm.weight"; });
  weights_write(f.ckpt, w);
  check_fails(eval(f.ckpt, f.bin), "missing tensor model.norm.weight");
}

TEST_CASE("eval names a tensor the config does not have") {
  EvalFiles f;
  std::vector<HostTensor> w = weights_read(f.ckpt);
  w.push_back({"model.layers.1.input_layernorm.weight", {128}, std::vector<float>(128, 1.0f)});
  weights_write(f.ckpt, w);
  check_fails(eval(f.ckpt, f.bin), "unexpected tensor model.layers.1.input_layernorm.weight");
}

TEST_CASE("eval names a tensor with the wrong shape") {
  EvalFiles f;
  std::vector<HostTensor> w = weights_read(f.ckpt);
  for (HostTensor& t : w) {
    if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {128, 64};  // was [64, 128]
  }
  weights_write(f.ckpt, w);
  check_fails(eval(f.ckpt, f.bin),
              "model.layers.0.self_attn.k_proj.weight has shape [128, 64], expected [64, 128]");
}

// --- bad data and flags -------------------------------------------------------

TEST_CASE("eval names a data file that does not exist") {
  EvalFiles f;
  check_fails(eval(f.ckpt, f.dir / "missing.bin"), "no such file");
}

TEST_CASE("eval refuses an empty data file") {
  EvalFiles f;
  file_write(f.dir / "empty.txt", "");
  check_fails(eval(f.ckpt, f.dir / "empty.txt"), "the file is empty");
}

TEST_CASE("eval refuses a bin file with a bad magic") {
  EvalFiles f;
  std::string bytes = file_read(f.bin);
  bytes[0] = 0x39, bytes[1] = 0x30, bytes[2] = 0, bytes[3] = 0;  // 12345
  file_write(f.bin, bytes);
  check_fails(eval(f.ckpt, f.bin), "bad magic 12345");
}

TEST_CASE("eval refuses a bin file whose header count disagrees with its size") {
  EvalFiles f;
  file_write(f.bin, file_read(f.bin) + std::string(2, '\0'));  // one uint16 more
  check_fails(eval(f.ckpt, f.bin), "the header says 200 tokens");
}

TEST_CASE("eval names a bin token id outside the vocabulary") {
  EvalFiles f;
  f.bin_tokens[40] = 300;  // vocab is 259; still a uint16 file
  train::token_file_write_bin(f.bin, f.bin_tokens);
  check_fails(eval(f.ckpt, f.bin), "token id 300 at position 40");
}

TEST_CASE("eval refuses data too short for one batch") {
  EvalFiles f;
  file_write(f.text, "hi\n");
  check_fails(eval(f.ckpt, f.text), "fewer than one batch");
}

TEST_CASE("eval refuses a seq-len above max_position_embeddings") {
  EvalFiles f;
  check_fails(eval(f.ckpt, f.bin, {"--batch-size", "1", "--seq-len", "65"}),
              "exceeds the checkpoint's max_position_embeddings (64)");
}

TEST_CASE("eval refuses a zero batch size") {
  EvalFiles f;
  check_fails(eval(f.ckpt, f.bin, {"--batch-size", "0", "--seq-len", "16"}),
              "--batch-size must be positive");
}

TEST_CASE("eval on an unavailable cuda device is one line and a non-zero exit") {
  if (cuda_device_count() > 0) return;
  EvalFiles f;
  check_fails(eval(f.ckpt, f.bin, {"--batch-size", "2", "--seq-len", "16", "--devices", "cuda:0"}),
              "cuda:0 is not available");
}
