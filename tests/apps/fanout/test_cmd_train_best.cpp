// `fanout train` with --keep-last, --save-best, --early-stop and --val-batches:
// rotation of step checkpoints, best/ holding the step of the lowest held-out loss
// (checked against metrics.jsonl), an early stop at the step the held-out history
// says, a run killed and resumed behaving as the uninterrupted one, and each
// misuse refused in one line.

#include <doctest/doctest.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/train/checkpoint.h"
#include "apps/train/train_options.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;
namespace fs = std::filesystem;

namespace {
// A tiny model trained hard (constant lr 0.03) on few documents and validated on
// text partly unlike them: the held-out loss falls, then rises.
struct BestRun {
  TrainFiles f{6};
  std::string val = f.dir / "val.txt";
  BestRun() {
    TrainFiles other(40);
    // Half the held-out text is in capitals, which training never shows: the model
    // first learns what both halves share, then pushes the capitals down.
    std::string text = file_read(other.data).substr(0, 1600), upper = text;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    file_write(val, text + "\n" + upper);
  }
  std::vector<std::string> args(const std::string& out, std::vector<std::string> extra) const {
    std::vector<std::string> a = {"--config",  f.config,    "--data", f.data,         "--val-data",
                                  val,         "--devices", "cpu:0",  "--batch-size", "4",
                                  "--seq-len", "16",        "--lr",   "0.03",         "--schedule",
                                  "constant",  "--warmup",  "0",      "--eval-every", "1",
                                  "--out",     out};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

// (step, val_loss) of every held-out line of a run.
std::vector<std::pair<int64_t, double>> val_losses(const std::string& run) {
  std::vector<std::pair<int64_t, double>> v;
  for (const nlohmann::json& j : metrics_read(run + "/metrics.jsonl")) {
    if (j.contains("val_loss"))
      v.emplace_back(j["step"].get<int64_t>(), j["val_loss"].get<double>());
  }
  return v;
}

nlohmann::json state_of(const std::string& dir) {
  return nlohmann::json::parse(file_read(dir + "/trainer_state.json"));
}

// The step at which --early-stop `patience` stops over this history (-1: never).
int64_t expected_stop(const std::vector<std::pair<int64_t, double>>& v, int64_t patience) {
  double best = 0;
  int64_t since = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 0 || v[i].second < best) {
      best = v[i].second, since = 0;
    } else if (++since >= patience) {
      return v[i].first;
    }
  }
  return -1;
}
}  // namespace

TEST_CASE("--save-best keeps the step of the lowest held-out loss, --keep-last the newest N") {
  BestRun b;
  const std::string run = b.f.dir / "run";
  CliResult r = train_cli(
      b.args(run, {"--steps", "16", "--save-best", "--save-every", "3", "--keep-last", "2"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  const auto v = val_losses(run);
  REQUIRE(v.size() == 16);
  size_t at = 0;
  for (size_t i = 1; i < v.size(); ++i) at = v[i].second < v[at].second ? i : at;
  // The schedule overfits: the best is neither the first nor the last evaluation.
  REQUIRE(at > 0);
  REQUIRE(at + 1 < v.size());
  const nlohmann::json best = state_of(run + "/best");
  CHECK(best["step"].get<int64_t>() == v[at].first);
  CHECK(best["val_loss"].get<double>() == v[at].second);
  CHECK(best["validation"]["best_step"].get<int64_t>() == v[at].first);
  CHECK(fs::is_regular_file(run + "/best/model.safetensors"));
  // The final checkpoint remembers the best too.
  CHECK(state_of(run + "/final")["validation"]["best_step"].get<int64_t>() == v[at].first);
  // Saves at 3, 6, 9, 12, 15: the newest two stay.
  std::vector<std::string> steps;
  for (const std::string& name : dir_list(run))
    if (name.rfind("step-", 0) == 0) steps.push_back(name);
  CHECK(steps == std::vector<std::string>{"step-000012", "step-000015"});
  for (const std::string& name : dir_list(run)) CHECK(name.find(".tmp-") == std::string::npos);
  // best/ is a whole checkpoint: fanout eval gives its held-out loss back.
  CliResult e = run_fanout({"eval", "--checkpoint", run + "/best", "--data", b.val, "--batch-size",
                            "4", "--seq-len", "16", "--devices", "cpu:0", "--json"});
  REQUIRE(e.rc == 0);
  CHECK(std::abs(last_json_line(e.out)["loss"].get<double>() - v[at].second) < 1e-6);
  // The eval lines say what they covered.
  CHECK(has(r.out, "batches ("));
  CHECK(has(r.out, "tokens)"));
}

TEST_CASE("--early-stop stops after N evaluations without improvement and exits 0") {
  BestRun b;
  const std::string run = b.f.dir / "run";
  CliResult r =
      train_cli(b.args(run, {"--steps", "60", "--early-stop", "2", "--save-every", "1", "--json"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  const auto v = val_losses(run);
  const int64_t stop = expected_stop(v, 2);
  REQUIRE(stop > 0);
  REQUIRE(stop < 60);
  CHECK(v.back().first == stop);  // nothing after the stop, and no second evaluation of it
  CHECK(has(r.out, "early stop at step " + std::to_string(stop) + ": "));
  CHECK(state_of(run + "/final")["step"].get<int64_t>() == stop);
  // The step it stopped at is final/ alone, not also a step-N.
  CHECK(fs::is_directory(run + "/" + train::checkpoint_step_name(stop - 1)));
  CHECK(!fs::exists(run + "/" + train::checkpoint_step_name(stop)));
  CHECK(metrics_steps(run + "/metrics.jsonl").back()["step"].get<int64_t>() == stop);
  const nlohmann::json summary = last_json_line(r.out);
  CHECK(summary["steps"].get<int64_t>() == stop);
  CHECK(summary["early_stop"].get<bool>());
}

TEST_CASE("a run killed and resumed keeps best/ and stops early as the uninterrupted run") {
  BestRun b;
  const std::string whole = b.f.dir / "whole", parts = b.f.dir / "parts";
  const std::vector<std::string> extra = {"--steps",      "60", "--early-stop", "3", "--save-best",
                                          "--save-every", "1"};
  CliResult u = train_cli(b.args(whole, extra));
  INFO("uninterrupted: " << u.out << u.err);
  REQUIRE(u.rc == 0);
  const auto v = val_losses(whole);
  const int64_t stop = expected_stop(v, 3);
  REQUIRE(stop > 0);
  // Kill at a step whose checkpoint (the step before) holds a count past 0 and a
  // best before it: both must survive the restart.
  int64_t kill = -1;
  for (int64_t k = 2; k < stop && kill < 0; ++k) {
    const nlohmann::json st =
        state_of(whole + "/" + std::string("step-") +
                 std::string(6 - std::to_string(k - 1).size(), '0') + std::to_string(k - 1));
    if (st["validation"]["evals_since_best"].get<int64_t>() > 0) kill = k;
  }
  REQUIRE(kill > 0);
  std::vector<std::string> args = {"train"};
  for (const std::string& a : b.args(parts, extra)) args.push_back(a);
  CliResult killed =
      run_fanout(args, "FANOUT_TEST_KILL_RANK=0 FANOUT_TEST_KILL_STEP=" + std::to_string(kill));
  REQUIRE(killed.rc != 0);
  CliResult resumed =
      train_cli({"--resume", "last", "--out", parts, "--devices", "cpu:0", "--json"});
  INFO("resumed: " << resumed.out << resumed.err);
  REQUIRE(resumed.rc == 0);
  CHECK(val_losses(parts) == v);
  CHECK(has(resumed.out, "early stop at step " + std::to_string(stop) + ": "));
  const nlohmann::json bw = state_of(whole + "/best"), bp = state_of(parts + "/best");
  CHECK(bp["step"] == bw["step"]);
  CHECK(bp["val_loss"] == bw["val_loss"]);
  CHECK(state_of(parts + "/final")["validation"] == state_of(whole + "/final")["validation"]);
  CHECK(file_read(parts + "/best/model.safetensors") ==
        file_read(whole + "/best/model.safetensors"));
}

TEST_CASE("--val-batches caps the evaluation, --eval-batches is the same setting") {
  BestRun b;
  const std::string run = b.f.dir / "run";
  CliResult r = train_cli(b.args(run, {"--steps", "2", "--eval-batches", "3"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "over 3 batches ("));
  CHECK(has(r.out, "(--val-batches)"));
  const nlohmann::json flags = state_of(run + "/final")["flags"];
  CHECK(flags["val-batches"].get<int64_t>() == 3);
  CHECK(!flags.contains("eval-batches"));
  // Losses over another part of the held-out set are not comparable: the history restarts.
  CliResult more = train_cli({"--resume", "last", "--out", run, "--devices", "cpu:0", "--steps",
                              "3", "--val-batches", "2"});
  INFO("more: " << more.out << more.err);
  REQUIRE(more.rc == 0);
  CHECK(has(more.out, "start over"));
  CHECK(has(more.out, "over 2 batches ("));
  // A checkpoint from before the rename saved it as "eval-batches".
  train::TrainOptions o;
  train::train_options_merge(o, {{"eval-batches", 7}}, {});
  CHECK(o.val_batches == 7);
  train::TrainOptions given;
  given.val_batches = 2;
  train::train_options_merge(given, {{"eval-batches", 7}}, {"val-batches"});
  CHECK(given.val_batches == 2);
  // The whole held-out set by default.
  train::TrainOptions d;
  CHECK(d.val_batches == 0);
}

TEST_CASE("--save-best, --early-stop and --keep-last misuse is refused in one line") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  // --val-split 0: --data alone holds nothing out, so nothing to compare.
  const std::vector<std::string> base = {
      "--config",  f.config, "--data",  f.data, "--devices", "cpu:0", "--batch-size", "4",
      "--seq-len", "16",     "--steps", "2",    "--out",     out,     "--val-split",  "0"};
  struct Case {
    std::vector<std::string> extra;
    std::string says;
  };
  const Case cases[] = {
      {{"--save-best"}, "--save-best compares held-out losses: give --val-data"},
      {{"--early-stop", "2"}, "--early-stop compares held-out losses: give --val-data"},
      {{"--save-best", "--val-data", f.data, "--eval-every", "0"}, "give --eval-every N"},
      {{"--early-stop", "2", "--val-data", f.data, "--eval-every", "0"}, "give --eval-every N"},
      {{"--keep-last", "-1"}, "--keep-last"},
      {{"--early-stop", "x"}, "--early-stop"},
      {{"--val-batches", "-2"}, "--val-batches"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    CliResult r = train_cli(args);
    INFO("args: " << c.extra[0] << "\nstdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.rc != 0);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, c.says));
    CHECK(!fs::exists(out + "/final"));
  }
}
