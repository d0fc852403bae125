// `fanout eval` through the real binary: the loss and token count of a good
// checkpoint (the same on one device as on two), then one broken input at a time
// (checkpoint directory, config.json, model.safetensors, data file, flags; FIFOs,
// non-finite weights, sizes that cannot fit, huge data files), each a non-zero exit
// with exactly one line on stderr saying what is wrong.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "apps/data/token_file.h"
#include "engine/core/cuda_runtime.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/input_util.h"

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
    data::token_file_write_bin(bin, bin_tokens);
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
    int64_t n = data::token_file_load(data).token_count();
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

TEST_CASE("eval refuses a config with yarn rope scaling") {
  EvalFiles f;
  config_edit(f.ckpt, [](nlohmann::json& j) {
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}};
  });
  check_fails(eval(f.ckpt, f.bin), "rope_scaling.rope_type \"yarn\" is not supported");
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
  data::token_file_write_bin(f.bin, f.bin_tokens);
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

TEST_CASE("eval refuses numeric flags out of range or empty naming the flag") {
  EvalFiles f;
  struct Case {
    const char* flag;
    const char* value;
    const char* phrase;
  };
  for (const Case& c : {Case{"--batch-size", "0", "--batch-size: '0' is out of range"},
                        Case{"--batch-size", "", "--batch-size: an empty value is not a number"},
                        Case{"--batch-size", "4611686018427387904", "is out of range"},
                        Case{"--seq-len", "-16", "--seq-len: '-16' is out of range"},
                        Case{"--seq-len", "1e3", "--seq-len: '1e3' is not a whole number"},
                        Case{"--max-batches", "-1", "--max-batches: '-1' is out of range"},
                        Case{"--max-batches", "", "--max-batches: an empty value"}}) {
    CAPTURE(c.flag);
    CAPTURE(c.value);
    // The flag under test replaces its default (given twice, CLI11 refuses the repeat).
    std::vector<std::string> flags = {"--batch-size", "2", "--seq-len", "16"};
    auto it = std::find(flags.begin(), flags.end(), c.flag);
    if (it != flags.end()) {
      it[1] = c.value;
    } else {
      flags.insert(flags.end(), {c.flag, c.value});
    }
    check_fails(eval(f.ckpt, f.bin, flags), c.phrase);
  }
}

TEST_CASE("eval on an unavailable cuda device is one line and a non-zero exit") {
  if (cuda_device_count() > 0) return;
  EvalFiles f;
  check_fails(eval(f.ckpt, f.bin, {"--batch-size", "2", "--seq-len", "16", "--devices", "cuda:0"}),
              "cuda:0 is not available");
}

// --- issue 17: non-regular files, non-finite weights, sizes, memory -----------

namespace {
// A LimitedRun that ended by itself, non-zero, with one stderr line holding `phrase`.
void check_fails_limited(const LimitedRun& r, const std::string& phrase) {
  INFO("rc " << r.rc << " timed out " << r.timed_out << " stderr: " << r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find("fanout: error: ") == 0);
  CHECK(r.err.find(phrase) != std::string::npos);
}

std::vector<std::string> eval_args(const std::string& ckpt, const std::string& data) {
  return {"eval", "--checkpoint", ckpt, "--data", data, "--batch-size", "2", "--seq-len", "16"};
}
}  // namespace

TEST_CASE("eval refuses a FIFO as config.json, model.safetensors or --data without blocking") {
  for (const char* which : {"config.json", "model.safetensors", "data"}) {
    CAPTURE(which);
    EvalFiles f;
    std::string data = f.bin;
    if (std::string(which) == "data") {
      data = f.dir / "fifo.bin";
    } else {
      fs::remove(f.ckpt + "/" + which);
    }
    Fifo fifo(std::string(which) == "data" ? data : f.ckpt + "/" + which);
    check_fails_limited(run_fanout_limited(eval_args(f.ckpt, data)),
                        fifo.path() + ": is a FIFO, not a regular file");
  }
}

TEST_CASE("eval refuses an empty --data") {
  EvalFiles f;
  check_fails(eval(f.ckpt, ""), "--data: an empty string is not a file name");
}

TEST_CASE("eval names the tensor of a checkpoint holding NaN or Inf") {
  for (float bad : {std::nanf(""), -INFINITY}) {
    CAPTURE(bad);
    EvalFiles f;
    std::vector<HostTensor> w = weights_read(f.ckpt);
    for (HostTensor& t : w) {
      if (t.name == "model.layers.0.mlp.down_proj.weight") t.data[10] = bad;
    }
    weights_write(f.ckpt, w);
    check_fails(eval(f.ckpt, f.bin),
                "tensor 'model.layers.0.mlp.down_proj.weight' holds non-finite values (" +
                    std::string(std::isnan(bad) ? "nan" : "-inf") + " at index 10)");
  }
}

TEST_CASE("eval refuses a config whose model cannot fit, naming the field and the bytes") {
  EvalFiles f;
  // The old binary laid out 18e9 tensors (minutes, then std::bad_alloc).
  config_edit(f.ckpt, [](nlohmann::json& j) { j["num_hidden_layers"] = 2'000'000'000; });
  check_fails_limited(run_fanout_limited(eval_args(f.ckpt, f.bin)),
                      "num_hidden_layers 2000000000 x 196864 per layer");
  config_edit(f.ckpt, [](nlohmann::json& j) {
    j["num_hidden_layers"] = 1;
    j["vocab_size"] = 2'000'000'000;
    j["hidden_size"] = 1 << 20;
  });
  check_fails_limited(run_fanout_limited(eval_args(f.ckpt, f.bin)),
                      "vocab_size 2000000000 x hidden_size 1048576 embeddings");
}

// The peak memory of an eval whose data is refused, above that of one on a tiny file.
TEST_CASE("eval refuses a 2 GB text file at once and checks a token file without reading it in") {
  EvalFiles f;
  const LimitedRun small = run_fanout_limited(eval_args(f.ckpt, f.bin));
  REQUIRE(small.rc == 0);
  // Sparse files: no disk space, instant to make.
  const std::string text = f.dir / "big.txt";
  file_write(text, "");
  fs::resize_file(text, uint64_t{2} << 30);
  const LimitedRun big_text = run_fanout_limited(eval_args(f.ckpt, text), 5);
  check_fails_limited(big_text, text + ": 2147483648 bytes of text is more than the ");
  CHECK(big_text.err.find("convert it to an llm.c .bin token file") != std::string::npos);
  if (kResidentMemoryChecked) {
    CHECK(big_text.max_rss_kb - small.max_rss_kb < 50 * 1024);  // the old binary: 8.5 GB
  }

  // 256 MB of uint16 tokens, all 0 but the last (300, outside the vocabulary).
  const std::string bin = f.dir / "big.bin";
  const int64_t count = (int64_t{256} << 20) / 2;
  std::string head = file_read(f.bin).substr(0, 1024);
  const int32_t n32 = static_cast<int32_t>(count);
  std::memcpy(head.data() + 8, &n32, 4);
  file_write(bin, head);
  fs::resize_file(bin, 1024 + 2 * count);
  {
    std::fstream out(bin, std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(1024 + 2 * (count - 1));
    const uint16_t id = 300;
    out.write(reinterpret_cast<const char*>(&id), 2);
  }
  const LimitedRun big_bin = run_fanout_limited(eval_args(f.ckpt, bin));
  check_fails_limited(big_bin, "token id 300 at position " + std::to_string(count - 1));
  // The old binary held the file and a 4-byte copy of every token: 768 MB more.
  if (kResidentMemoryChecked) {
    CHECK_MESSAGE(big_bin.max_rss_kb - small.max_rss_kb < 100 * 1024,
                  "peak " << big_bin.max_rss_kb << " KB against " << small.max_rss_kb << " KB");
  }
}

TEST_CASE("eval reads a token file named otherwise as tokens, not text") {
  EvalFiles f;
  const nlohmann::json want = eval_json(f.ckpt, f.bin);
  for (const char* name : {"data.BIN", "data.bin.1"}) {
    CAPTURE(name);
    fs::copy_file(f.bin, f.dir / name);
    CHECK(eval_json(f.ckpt, f.dir / name) == want);  // read as text: 1,424 bytes, other batches
  }
}

TEST_CASE("eval --logits writes the first batch's logits as a .npy file, never over an input") {
  EvalFiles f;
  const std::string npy = f.dir / "logits.npy";
  CliResult r = eval(f.ckpt, f.bin, {"--batch-size", "2", "--seq-len", "16", "--logits", npy});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("logits of the first batch (2 x 16 x 259, f32) written to") !=
        std::string::npos);
  std::ifstream in(npy, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // NumPy format 1.0: magic, version, a header padded to 64 bytes, then the values.
  REQUIRE(bytes.size() > 10);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const size_t header = static_cast<unsigned char>(bytes[8]) |
                        static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
  CHECK((10 + header) % 64 == 0);
  CHECK(bytes.find("'shape': (2, 16, 259, )") != std::string::npos);
  CHECK(bytes.size() == 10 + header + 2 * 16 * 259 * sizeof(float));
  // The values are logits: finite, not all equal.
  std::vector<float> v((bytes.size() - 10 - header) / sizeof(float));
  std::memcpy(v.data(), bytes.data() + 10 + header, v.size() * sizeof(float));
  CHECK(std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }));
  CHECK(*std::max_element(v.begin(), v.end()) > *std::min_element(v.begin(), v.end()));

  const std::string before = file_read(f.bin);
  check_fails(eval(f.ckpt, f.bin, {"--logits", f.bin}), "--logits names the --data file");
  CHECK(file_read(f.bin) == before);
  check_fails(eval(f.ckpt, f.bin, {"--logits", f.dir.path}), "--logits");
}

// --- results that are not numbers ---------------------------------------------

TEST_CASE("eval refuses a rope_scaling whose angles overflow instead of printing loss nan") {
  EvalFiles f;
  config_edit(f.ckpt, [](nlohmann::json& j) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 1e-320},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 64}};
  });
  check_fails(eval(f.ckpt, f.bin), "which no float angle can hold; check the scaling factor");
}

TEST_CASE("eval refuses a config whose rope_scaling and rope_parameters disagree") {
  EvalFiles f;
  config_edit(f.ckpt, [](nlohmann::json& j) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
    j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  });
  check_fails(eval(f.ckpt, f.bin), "disagree; keep one of them");
}

TEST_CASE("eval fails naming the checkpoint when the loss is not a finite number") {
  EvalFiles f;
  std::vector<HostTensor> w = weights_read(f.ckpt);
  for (HostTensor& t : w) {
    if (t.name == "model.norm.weight") std::fill(t.data.begin(), t.data.end(), 3e38f);
  }
  weights_write(f.ckpt, w);
  CliResult r = eval(f.ckpt, f.bin);
  check_fails(r, "(not a finite number): the checkpoint's weights overflow on this data");
  CHECK(r.out.find("nan") == std::string::npos);
}
