// How a `fanout train` run stops early, through the real binary in the background:
// SIGKILL at several moments during checkpoint writes leaves every step directory
// loadable and `--resume last` completes; SIGINT finishes the step, checkpoints it
// and exits 130, and the run resumes from there; a diverging run stops with one
// error line naming the step, and its last good checkpoint still loads.

#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "apps/train/checkpoint.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

bool is_step_dir(const std::string& name) {
  return name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos;
}

bool has_temp_dir(const std::string& dir) {
  for (const std::string& name : dir_list(dir)) {
    if (name.find(".tmp-") != std::string::npos) return true;
  }
  return false;
}

// Checks that `lines` are steps 1..last, each once.
void check_steps(const std::vector<nlohmann::json>& lines, int64_t last) {
  REQUIRE(static_cast<int64_t>(lines.size()) == last);
  for (int64_t s = 1; s <= last; ++s) CHECK(lines[s - 1]["step"].get<int64_t>() == s);
}

// Reads every step-N directory of `out` (each must load, holding step N); returns the highest N.
int64_t check_step_dirs(const std::string& out) {
  int64_t last = 0;
  for (const std::string& name : dir_list(out)) {
    if (!is_step_dir(name)) continue;
    CAPTURE(name);
    int64_t step = std::stoll(name.substr(5));
    train::Checkpoint c;
    CHECK_NOTHROW(c = train::checkpoint_read(out + "/" + name));
    CHECK(c.state.step == step);
    last = std::max(last, step);
  }
  return last;
}
}  // namespace

TEST_CASE(
    "train killed with SIGKILL while writing checkpoints leaves them loadable and resumable") {
  TrainFiles f;
  // The tiny preset (0.85M parameters): each checkpoint is about 10 MB, written and fsynced.
  // Moments after step-000001 appears: a few delays, and the instant a temporary dir exists.
  const int kWhenTemp = -1;
  int attempt = 0, cut_writes = 0;
  for (int delay_ms : {0, 5, 20, kWhenTemp, 60}) {
    CAPTURE(delay_ms);
    std::string out = f.dir / ("run" + std::to_string(attempt++));
    BackgroundTrain run({"--preset", "tiny", "--data", f.data, "--devices", "cpu:0", "--batch-size",
                         "1", "--seq-len", "16", "--steps", "200", "--save-every", "1",
                         "--eval-every", "0", "--out", out});
    REQUIRE(poll_until([&] { return fs::exists(out + "/step-000001"); }, 60));
    if (delay_ms == kWhenTemp) {
      CHECK(poll_until([&] { return has_temp_dir(out); }, 30));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }
    run.signal(SIGKILL);
    REQUIRE(run.wait(30) == 128 + SIGKILL);

    cut_writes += has_temp_dir(out);
    int64_t last = check_step_dirs(out);
    REQUIRE(last >= 1);
    CHECK(train::checkpoint_find_last(out) == out + "/" + train::checkpoint_step_name(last));
    CHECK(!fs::exists(out + "/final"));

    CliResult r = train_cli(
        {"--resume", "last", "--out", out, "--steps", std::to_string(last + 2), "--json"});
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.rc == 0);
    // Metrics lines the killed run wrote past its checkpoint were dropped, then rewritten.
    check_steps(metrics_steps(out + "/metrics.jsonl"), last + 2);
    CHECK(check_step_dirs(out) == last + 1);  // the last step is final/ alone
    CHECK(train::checkpoint_read(out + "/final").state.step == last + 2);
    CHECK(!has_temp_dir(out));  // the next write of the same name removed the leftover
  }
  CHECK(cut_writes >= 1);  // at least one kill did land in the middle of a checkpoint write
}

TEST_CASE("train on SIGINT finishes the step and checkpoints it and exits 130 then resumes") {
  TrainFiles f;
  std::string out = f.dir / "run";
  BackgroundTrain run({"--config", f.config, "--data", f.data, "--devices", "cpu:0,cpu:1",
                       "--batch-size", "4", "--seq-len", "16", "--steps", "100000", "--save-every",
                       "0", "--out", out});
  REQUIRE(poll_until([&] { return metrics_steps(out + "/metrics.jsonl").size() >= 3; }, 60));
  run.signal(SIGINT);
  int rc = run.wait(60);
  INFO("stdout: " << run.out() << "\nstderr: " << run.err());
  REQUIRE(rc == 130);
  CHECK(run.err().empty());

  std::vector<nlohmann::json> lines = metrics_steps(out + "/metrics.jsonl");
  REQUIRE(!lines.empty());
  int64_t n = lines.back()["step"].get<int64_t>();
  check_steps(lines, n);
  std::string ckpt = train::checkpoint_step_name(n);
  CHECK(run.out().find("interrupted at step " + std::to_string(n)) != std::string::npos);
  CHECK(dir_list(out) == std::vector<std::string>{"curves.svg", "metrics.jsonl", ckpt});
  train::Checkpoint c = train::checkpoint_read(out + "/" + ckpt);
  CHECK(c.state.step == n);
  CHECK(c.state.tokens_seen == n * 4 * 16);

  CliResult r = train_cli({"--resume", "last", "--out", out, "--steps", std::to_string(n + 3)});
  INFO("resumed stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  check_steps(metrics_steps(out + "/metrics.jsonl"), n + 3);
  CHECK(train::checkpoint_read(out + "/final").state.step == n + 3);
}

TEST_CASE("train stops a diverging run with one line naming the step and keeps the checkpoint") {
  TrainFiles f;
  // lr 1e6 without clipping: Adam's first step moves every weight by about 1e6.
  auto diverge = [&](const std::string& out, const std::string& save_every) {
    return train_cli(
        {"--config",     f.config, "--data",       f.data,     "--devices",  "cpu:0",
         "--batch-size", "2",      "--seq-len",    "16",       "--steps",    "20",
         "--lr",         "1e6",    "--clip",       "0",        "--schedule", "constant",
         "--warmup",     "0",      "--save-every", save_every, "--out",      out});
  };
  std::string out = f.dir / "run";
  CliResult r = diverge(out, "1");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  const std::string prefix = "fanout: error: step ";
  REQUIRE(r.err.rfind(prefix, 0) == 0);
  int64_t k = std::stoll(r.err.substr(prefix.size()));
  CHECK(k >= 2);  // step 1 starts from a sane model
  CHECK((r.err.find("the loss is") != std::string::npos ||
         r.err.find("the gradient norm is") != std::string::npos));
  std::string good = train::checkpoint_step_name(k - 1);
  CHECK(r.err.find("last good checkpoint: " + out + "/" + good) != std::string::npos);

  // The failed step is neither logged nor saved; the one before it loads, all finite.
  check_steps(metrics_steps(out + "/metrics.jsonl"), k - 1);
  CHECK(!fs::exists(out + "/" + train::checkpoint_step_name(k)));
  CHECK(!fs::exists(out + "/final"));
  train::Checkpoint c = train::checkpoint_read(out + "/" + good);
  CHECK(c.state.step == k - 1);
  bool finite = true;
  for (float v : c.params) finite &= std::isfinite(v);
  CHECK(finite);

  // Without checkpoints the line says so.
  std::string none = f.dir / "none";
  r = diverge(none, "0");
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find("step " + std::to_string(k) + ": ") != std::string::npos);
  CHECK(r.err.find("no checkpoint was written yet") != std::string::npos);
  CHECK(dir_list(none) == std::vector<std::string>{"curves.svg", "metrics.jsonl"});
}
