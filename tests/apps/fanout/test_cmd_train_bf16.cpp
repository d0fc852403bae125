// `fanout train --precision bf16` through the real binary: a resumed bf16 run is
// bit-identical to one that never stopped (dp, and zero1 whose fp32 master is
// sharded), checkpoints hold fp32 weights whatever the precision, eval and
// generate read them in either precision, and --grad-comm bf16 trains.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "apps/train/checkpoint.h"
#include "engine/core/dtype.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

std::vector<std::string> bf16_run(const TrainFiles& f, const std::string& out,
                                  std::vector<std::string> extra) {
  std::vector<std::string> args = {"--config", f.config,      "--data", f.data,      "--batch-size",
                                   "4",        "--seq-len",   "16",     "--shuffle", "--warmup",
                                   "4",        "--precision", "bf16",   "--out",     out};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// How many values bf16 cannot hold exactly: an fp32 master has most of them.
int64_t not_bf16(const std::vector<float>& v) {
  int64_t n = 0;
  for (float x : v) n += bf16_to_float(float_to_bf16(x)) != x;
  return n;
}

}  // namespace

TEST_CASE("train in bf16 resumed is bit-identical to an uninterrupted bf16 run, dp and zero1") {
  TrainFiles f{2};
  struct Case {
    const char* name;
    std::vector<std::string> flags;
  };
  for (const Case& k : {Case{"dp", {"--devices", "cpu:0,cpu:1"}},
                        Case{"zero1", {"--devices", "cpu:0,cpu:1,cpu:2", "--strategy", "zero1"}}}) {
    std::string name = k.name;
    CAPTURE(name);
    std::string a = f.dir / (std::string(k.name) + "-A"), b = f.dir / (std::string(k.name) + "-B");
    std::vector<std::string> args = bf16_run(f, a, {"--steps", "6"});
    args.insert(args.end(), k.flags.begin(), k.flags.end());
    CliResult r = train_cli(args);
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("bf16 mixed precision") != std::string::npos);
    args = bf16_run(f, b, {"--steps", "3"});
    args.insert(args.end(), k.flags.begin(), k.flags.end());
    REQUIRE(train_cli(args).rc == 0);
    // Devices are run-local (not taken from the checkpoint): give them again.
    args = {"--resume", "last", "--out", b, "--steps", "6", "--devices", k.flags[1]};
    r = train_cli(args);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.rc == 0);
    train::Checkpoint ca = train::checkpoint_read(a + "/final");
    train::Checkpoint cb = train::checkpoint_read(b + "/final");
    CHECK(cb.state.flags["precision"] == "bf16");
    CHECK(bits_equal(ca.params, cb.params));
    CHECK(bits_equal(ca.exp_avg, cb.exp_avg));
    CHECK(bits_equal(ca.exp_avg_sq, cb.exp_avg_sq));
    // The checkpoint is the fp32 master, whole (zero1 gathers every shard's).
    CHECK(not_bf16(ca.params) > static_cast<int64_t>(ca.params.size() / 2));
    std::vector<nlohmann::json> la = metrics_steps(a + "/metrics.jsonl");
    std::vector<nlohmann::json> lb = metrics_steps(b + "/metrics.jsonl");
    REQUIRE(la.size() == 6);
    REQUIRE(lb.size() == 6);
    for (size_t i = 0; i < la.size(); ++i) {
      CAPTURE(i);
      CHECK(la[i]["loss"].get<double>() == lb[i]["loss"].get<double>());
      CHECK(la[i]["grad_norm"].get<double>() == lb[i]["grad_norm"].get<double>());
    }
  }
}

TEST_CASE("a bf16 run's checkpoint is fp32 and eval and generate read it in either precision") {
  TrainFiles f{2};
  std::string out = f.dir / "run";
  CliResult r = train_cli(bf16_run(f, out, {"--steps", "3", "--devices", "cpu:0"}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  FlatWeights w = weights_concat(out + "/final");
  CHECK(not_bf16(w.values) > static_cast<int64_t>(w.values.size() / 2));

  auto eval = [&](const char* precision) {
    CliResult e =
        run_fanout({"eval", "--checkpoint", out + "/final", "--data", f.data, "--batch-size", "2",
                    "--seq-len", "16", "--precision", precision, "--json"});
    INFO("stderr: " << e.err);
    REQUIRE(e.rc == 0);
    std::string last = e.out.substr(e.out.rfind('{'));
    return nlohmann::json::parse(last)["loss"].get<double>();
  };
  double l32 = eval("fp32"), l16 = eval("bf16");
  CHECK(std::isfinite(l16));
  CHECK(l16 != l32);                         // bf16 really ran ...
  CHECK(std::abs(l16 - l32) <= 0.02 * l32);  // ... and computed the same model
  CliResult g = run_fanout({"generate", "--checkpoint", out + "/final", "--prompt", "the ",
                            "--max-new-tokens", "8", "--precision", "bf16", "--temperature", "0"});
  INFO("stderr: " << g.err);
  CHECK(g.rc == 0);
  CHECK(g.out.rfind("the ", 0) == 0);
  CliResult bad =
      run_fanout({"eval", "--checkpoint", out + "/final", "--data", f.data, "--precision", "fp8"});
  CHECK(bad.rc != 0);
  CHECK(bad.err_lines() == 1);
  CHECK(has(bad.err, "--precision must be fp32 or bf16, got 'fp8'"));
}

TEST_CASE("train with grad-comm bf16 trains and says so") {
  TrainFiles f{2};
  std::string out = f.dir / "run";
  CliResult r = train_cli(bf16_run(
      f, out,
      {"--steps", "3", "--devices", "cpu:0,cpu:1", "--grad-comm", "bf16", "--strategy", "zero1"}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("bf16 gradient sums") != std::string::npos);
  std::vector<nlohmann::json> lines = metrics_steps(out + "/metrics.jsonl");
  REQUIRE(lines.size() == 3);
  CHECK(lines[2]["loss"].get<double>() < lines[0]["loss"].get<double>());
}

TEST_CASE("a bf16 training curve tracks the fp32 one: the held-out loss within 3 percent") {
  // The README's run (embedded corpus, tiny preset) shortened to 60 steps of 8 x 64
  // so that it fits the test budget; the full run is measured in the note.
  TempDir dir("fanout-bf16-curve");
  auto held_out = [&](const char* precision) {
    std::string out = dir / precision;
    CliResult r = train_cli({"--steps", "60", "--warmup", "6", "--batch-size", "8", "--seq-len",
                             "64", "--eval-every", "30", "--eval-batches", "8", "--precision",
                             precision, "--out", out});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    double last = 0;
    for (const nlohmann::json& j : metrics_read(out + "/metrics.jsonl"))
      if (j.contains("val_loss")) last = j["val_loss"].get<double>();
    return last;
  };
  double f32 = held_out("fp32"), bf16 = held_out("bf16");
  CHECK(f32 > 0);
  CHECK(f32 < 3.0);  // it learned something (the corpus's unigram entropy is 3.27)
  CHECK(bf16 != f32);
  CHECK(std::abs(bf16 - f32) <= 0.03 * f32);
}
