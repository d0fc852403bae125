// `fanout train` refuses bad input before writing anything: each case below is a
// non-zero exit with exactly one non-empty stderr line naming the problem, and the
// --out directory (absent beforehand) still absent afterwards, so no run directory
// and no checkpoint. A damaged checkpoint given to --resume, or one that the new
// --steps or --batch-size do not fit, leaves the run as it was.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "apps/data/token_file.h"
#include "engine/core/cuda_runtime.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

using Flags = std::vector<std::pair<std::string, std::string>>;
const std::string kDrop = "<drop>";  // a change that removes the flag
const std::string kNoValue = "";     // a flag without a value

// A good tiny run (2 steps of 4 x 16 on two CPU devices) with `changes` applied.
std::vector<std::string> args_with(const TrainFiles& f, const std::string& out,
                                   const Flags& changes) {
  Flags flags = {{"--config", f.config}, {"--data", f.data},  {"--devices", "cpu:0,cpu:1"},
                 {"--batch-size", "4"},  {"--seq-len", "16"}, {"--steps", "2"},
                 {"--out", out}};
  for (const auto& [name, value] : changes) {
    auto it = std::find_if(flags.begin(), flags.end(), [&](auto& p) { return p.first == name; });
    if (value == kDrop) {
      if (it != flags.end()) flags.erase(it);
    } else if (it != flags.end()) {
      it->second = value;
    } else {
      flags.emplace_back(name, value);
    }
  }
  std::vector<std::string> args;
  for (const auto& [name, value] : flags) {
    args.push_back(name);
    if (!value.empty()) args.push_back(value);
  }
  return args;
}

// A non-zero exit, one stderr line holding `phrase`.
void check_fails(const CliResult& r, const std::string& phrase) {
  INFO("rc " << r.rc << " stderr: " << r.err << "stdout: " << r.out);
  CHECK(r.rc != 0);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind("fanout: error: ", 0) == 0);
  CHECK(r.err.find(phrase) != std::string::npos);
}

// The data files the cases point --data at.
struct BadData {
  std::string empty, magic, count, vocab, tiny;
  explicit BadData(const TrainFiles& f)
      : empty(f.dir / "empty.txt"),
        magic(f.dir / "magic.bin"),
        count(f.dir / "count.bin"),
        vocab(f.dir / "vocab.bin"),
        tiny(f.dir / "tiny.txt") {
    std::vector<int32_t> tokens;
    for (int i = 0; i < 400; ++i) tokens.push_back((i * 37 + 11) % 259);
    file_write(empty, "");
    data::token_file_write_bin(magic, tokens);
    std::string bytes = file_read(magic);
    bytes[0] = 0x39, bytes[1] = 0x30, bytes[2] = 0, bytes[3] = 0;  // 12345
    file_write(magic, bytes);
    data::token_file_write_bin(count, tokens);
    file_write(count, file_read(count) + std::string(2, '\0'));  // one uint16 more
    tokens[40] = 300;
    data::token_file_write_bin(vocab, tokens);
    file_write(tiny, "too short\n");
  }
};

struct Case {
  const char* what;
  Flags changes;
  std::string phrase;
};
}  // namespace

TEST_CASE("train refuses each bad flag or data file with one line and no run directory") {
  TrainFiles f;
  BadData bad(f);
  std::string ckpt = f.dir / "ckpt";
  fs::create_directory(ckpt);
  checkpoint_write(ckpt, cli_test_config());
  std::vector<Case> cases = {
      {"unknown flag", {{"--bogus", kNoValue}}, "--bogus"},
      {"zero batch", {{"--batch-size", "0"}}, "--batch-size: '0' is out of range (expected 1.."},
      {"seq-len past max positions",
       {{"--seq-len", "65"}},
       "--seq-len 65 exceeds the model's max_position_embeddings (64)"},
      {"missing data", {{"--data", f.dir / "missing.txt"}}, "missing.txt: no such file"},
      {"empty data", {{"--data", bad.empty}}, "the file is empty"},
      {"bad magic", {{"--data", bad.magic}}, "bad magic 12345"},
      {"bin count vs size", {{"--data", bad.count}}, "the header says 400 tokens"},
      {"token past vocab",
       {{"--data", bad.vocab}},
       "token id 300 at position 40 is out of range for vocabulary size 259"},
      {"data shorter than a batch", {{"--data", bad.tiny}}, "fewer than one batch of 4 x 16"},
      {"missing val data", {{"--val-data", f.dir / "nope.txt"}}, "nope.txt: no such file"},
      {"grad-accum not dividing",
       {{"--grad-accum", "3"}},
       "--batch-size 4 is not a multiple of --grad-accum 3"},
      {"micro-batch sizes not summing",
       {{"--micro-batch-sizes", "1,1"}},
       "--micro-batch-sizes add up to 2 rows but each micro-batch has 4"},
      {"micro-batch sizes per device",
       {{"--micro-batch-sizes", "4"}},
       "--micro-batch-sizes gives 1 sizes for 2 devices"},
      {"unknown precision", {{"--precision", "fp16"}}, "--precision must be fp32 or bf16"},
      {"unknown grad-comm", {{"--grad-comm", "int8"}}, "--grad-comm must be fp32 or bf16"},
      {"unknown projections",
       {{"--projections", "merged"}},
       "--projections must be auto, fused or separate, got 'merged'"},
      {"unknown graphs", {{"--graphs", "yes"}}, "--graphs must be auto, on or off, got 'yes'"},
      {"unknown gemm-algo",
       {{"--gemm-algo", "fastest"}},
       "--gemm-algo must be heuristic or timed, got 'fastest'"},
      {"gemm-algo timed on CPU devices",
       {{"--gemm-algo", "timed"}, {"--precision", "bf16"}},
       "--gemm-algo timed times cuBLASLt's GEMM algorithms on CUDA devices; these are CPU "
       "devices"},
      {"graphs with the loss on the output device",
       {{"--graphs", "on"}, {"--loss-on", "output"}},
       "--graphs on needs --loss-on replicas: with --loss-on output the logits leave"},
      {"graphs with overlap",
       {{"--graphs", "on"}, {"--overlap", kNoValue}},
       "--graphs on records backward whole: it cannot overlap the gradient sums with it (add "
       "--no-overlap)"},
      {"graphs under zero2",
       {{"--graphs", "on"}, {"--strategy", "zero2"}},
       "--graphs on works with --strategy dp, ddp or zero1: zero2 hands each layer's gradients"},
      {"graphs with a pipeline",
       {{"--graphs", "on"}, {"--pp", "2"}},
       "--graphs on records each replica's forward and backward; a --pp grid passes activations"},
      {"unknown strategy",
       {{"--strategy", "fsdp"}},
       "--strategy must be dp, zero1, zero2, zero3 or ddp"},
      {"ddp in one process", {{"--strategy", "ddp"}}, "found no launcher's variables"},
      {"bare device", {{"--devices", "cpu"}}, "--devices needs indices"},
      {"unknown schedule", {{"--schedule", "linear"}}, "--schedule must be cosine or constant"},
      {"zero lr", {{"--lr", "0"}}, "--lr must be a finite number in (0, 1e+06]"},
      {"zero steps", {{"--steps", "0"}}, "--steps: '0' is out of range (expected 1.."},
      {"init with config",
       {{"--init", ckpt}},
       "--init takes the model from its checkpoint: drop --preset and --config"},
      {"resume last without a run",
       {{"--resume", "last"}, {"--config", kDrop}},
       "no checkpoint found"},
      {"a model flag beside --resume",
       {{"--resume", "last"}},
       "--resume continues the checkpoint's model: drop --config"},
  };
  if (cuda_device_count() == 0) {
    cases.push_back({"cuda without a gpu", {{"--devices", "cuda:0"}}, "cuda:0 is not available"});
  }
  int n = 0;
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::string out = f.dir / ("out" + std::to_string(n++));
    check_fails(train_cli(args_with(f, out, c.changes)), c.phrase);
    CHECK(!fs::exists(out));
  }
}

TEST_CASE("train refuses an out directory that holds files unless resuming") {
  TrainFiles f;
  std::string out = f.dir / "busy";
  fs::create_directory(out);
  file_write(out + "/notes.txt", "mine");
  check_fails(train_cli(args_with(f, out, {})),
              "--out " + out + " already holds files: continue it with --resume last");
  CHECK(dir_list(out) == std::vector<std::string>{"notes.txt"});
  CHECK(file_read(out + "/notes.txt") == "mine");
}

TEST_CASE("train refuses to resume a damaged checkpoint and leaves the run as it was") {
  TrainFiles f;
  std::string run = f.dir / "run";
  CliResult r = train_cli(args_with(f, run, {{"--steps", "3"}, {"--save-every", "1"}}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  REQUIRE(dir_list(run) == std::vector<std::string>{"curves.svg", "final", "metrics.jsonl",
                                                    "step-000001", "step-000002"});
  std::string metrics = file_read(run + "/metrics.jsonl");
  auto check_untouched = [&] {
    CHECK(dir_list(run) == std::vector<std::string>{"curves.svg", "final", "metrics.jsonl",
                                                    "step-000001", "step-000002"});
    CHECK(file_read(run + "/metrics.jsonl") == metrics);
  };

  SUBCASE("truncated model.safetensors") {
    std::string path = run + "/final/model.safetensors";
    std::string bytes = file_read(path);
    file_write(path, bytes.substr(0, bytes.size() / 2));
    check_fails(train_cli({"--resume", "last", "--out", run}), "checkpoint " + run + "/final");
    check_untouched();
    std::string fresh = f.dir / "fresh";
    check_fails(train_cli({"--resume", run + "/final", "--out", fresh}), "model.safetensors");
    CHECK(!fs::exists(fresh));
  }
  SUBCASE("trainer_state.json that is not JSON") {
    file_write(run + "/step-000001/trainer_state.json", "{\"version\": 1, \"step\":");
    std::string fresh = f.dir / "fresh";
    check_fails(train_cli({"--resume", run + "/step-000001", "--out", fresh}),
                "trainer_state.json: not valid JSON");
    CHECK(!fs::exists(fresh));
    check_untouched();
  }
  SUBCASE("trainer_state.json with a negative step") {
    std::string path = run + "/step-000002/trainer_state.json";
    nlohmann::json j = nlohmann::json::parse(file_read(path));
    j["step"] = -2;
    file_write(path, j.dump());
    std::string fresh = f.dir / "fresh";
    check_fails(train_cli({"--resume", run + "/step-000002", "--out", fresh}),
                "\"step\" is negative");
    CHECK(!fs::exists(fresh));
    check_untouched();
  }
  SUBCASE("saved flags of the wrong type") {
    std::string path = run + "/final/trainer_state.json";
    nlohmann::json j = nlohmann::json::parse(file_read(path));
    j["flags"]["batch-size"] = "four";
    file_write(path, j.dump());
    check_fails(train_cli({"--resume", "last", "--out", run}),
                "the saved run settings are damaged");
    check_untouched();
  }
  SUBCASE("missing optimizer state") {
    fs::remove(run + "/step-000001/optimizer.safetensors");
    std::string fresh = f.dir / "fresh";
    check_fails(train_cli({"--resume", run + "/step-000001", "--out", fresh}),
                "missing optimizer.safetensors");
    CHECK(!fs::exists(fresh));
    check_untouched();
  }
}

TEST_CASE("train refuses a resume whose steps or batch do not fit the checkpoint before writing") {
  TrainFiles f;  // about 3200 tokens: 50 batches of 4 x 16, 3 of 64 x 16
  std::string run = f.dir / "run";
  CliResult r = train_cli(args_with(f, run, {{"--steps", "6"}}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  std::string ckpt = run + "/final", fresh = f.dir / "fresh";
  check_fails(train_cli({"--resume", ckpt, "--steps", "3", "--out", fresh}),
              "--steps 3 is below the resumed checkpoint's step 6");
  CHECK(!fs::exists(fresh));
  // The saved data position (token 6 x 64 = 384) is no boundary of 64-row batches.
  check_fails(train_cli({"--resume", ckpt, "--batch-size", "64", "--out", fresh}),
              "the checkpoint stopped at token 384 of its epoch, which is not a boundary of "
              "batches of 64 x 16");
  CHECK(!fs::exists(fresh));
}
