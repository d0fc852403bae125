// `fanout train --resume` through the real binary: a run resumed from its last
// checkpoint ends bit-identical to one that never stopped (weights, AdamW moments,
// data position and every logged loss, across an epoch boundary of shuffled data);
// an explicit checkpoint directory resumes into a new --out; and a checkpoint saved
// on two devices continues on one (and under zero1 on three) with the same losses.
// --resume auto over a damaged checkpoint names the entry; a link out is not followed.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "apps/train/checkpoint.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

// Two documents: 4 batches of 4 x 16 per epoch, so 6 steps start a second epoch.
// Warmup 4 > 3 keeps the first 3 learning rates independent of --steps.
std::vector<std::string> resume_run(const TrainFiles& f, const std::string& out,
                                    std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "--config",    f.config,       "--data", f.data,      "--devices",
      "cpu:0,cpu:1", "--batch-size", "4",      "--seq-len", "16",
      "--shuffle",   "--warmup",     "4",      "--out",     out};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Checks that `lines` are steps first..last, each once.
void check_steps(const std::vector<nlohmann::json>& lines, int64_t first, int64_t last) {
  REQUIRE(static_cast<int64_t>(lines.size()) == last - first + 1);
  for (int64_t s = first; s <= last; ++s) CHECK(lines[s - first]["step"].get<int64_t>() == s);
}

// Relative L2 distance of two weight sets.
double weights_rel_l2(const std::string& a_dir, const std::string& b_dir) {
  FlatWeights a = weights_concat(a_dir), b = weights_concat(b_dir);
  REQUIRE(a.names == b.names);
  double d2 = 0, b2 = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    double d = double(a.values[i]) - b.values[i];
    d2 += d * d, b2 += double(b.values[i]) * b.values[i];
  }
  return std::sqrt(d2 / b2);
}

// Run A: 6 steps in one go, checkpoints step-000003 and final/ (step 6).
struct Uninterrupted {
  TrainFiles f{2};
  std::string a = f.dir / "A";
  std::vector<nlohmann::json> lines;
  Uninterrupted() {
    CliResult r = train_cli(resume_run(f, a, {"--steps", "6", "--save-every", "3"}));
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    lines = metrics_steps(a + "/metrics.jsonl");
    check_steps(lines, 1, 6);
  }
};
}  // namespace

TEST_CASE("train resumed with resume last is bit-identical to an uninterrupted run") {
  Uninterrupted run;
  std::string b = run.f.dir / "B";
  CliResult r = train_cli(resume_run(run.f, b, {"--steps", "3"}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  REQUIRE(train::checkpoint_read(b + "/final").state.step == 3);
  r = train_cli({"--resume", "last", "--out", b, "--steps", "6"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("resumed from " + b + "/final") != std::string::npos);

  // The raw floats of every tensor, then the whole checkpoint.
  FlatWeights wa = weights_concat(run.a + "/final"), wb = weights_concat(b + "/final");
  CHECK(wa.names == wb.names);
  CHECK(bits_equal(wa.values, wb.values));
  train::Checkpoint ca = train::checkpoint_read(run.a + "/final");
  train::Checkpoint cb = train::checkpoint_read(b + "/final");
  CHECK(cb.state.step == 6);
  CHECK(bits_equal(ca.params, cb.params));
  CHECK(bits_equal(ca.exp_avg, cb.exp_avg));
  CHECK(bits_equal(ca.exp_avg_sq, cb.exp_avg_sq));
  CHECK(ca.state.data.epoch == 1);  // the run did cross into a second epoch
  CHECK(cb.state.data.epoch == ca.state.data.epoch);
  CHECK(cb.state.data.index == ca.state.data.index);
  CHECK(cb.state.tokens_seen == ca.state.tokens_seen);

  std::vector<nlohmann::json> lines = metrics_steps(b + "/metrics.jsonl");
  check_steps(lines, 1, 6);
  for (size_t i = 0; i < lines.size(); ++i) {
    CAPTURE(i);
    CHECK(lines[i]["loss"].get<double>() == run.lines[i]["loss"].get<double>());
    CHECK(lines[i]["grad_norm"].get<double>() == run.lines[i]["grad_norm"].get<double>());
    CHECK(lines[i]["lr"].get<double>() == run.lines[i]["lr"].get<double>());
  }
}

TEST_CASE("train resumes from an explicit checkpoint directory into a new out directory") {
  Uninterrupted run;
  std::vector<std::string> before = dir_list(run.a);
  std::string c = run.f.dir / "C";
  CliResult r = train_cli({"--resume", run.a + "/step-000003", "--out", c});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  // The saved flags (--steps 6, --save-every 3, the data) carry over; A is untouched.
  CHECK(dir_list(c) == std::vector<std::string>{"curves.svg", "final", "metrics.jsonl"});
  CHECK(dir_list(run.a) == before);
  CHECK(metrics_steps(run.a + "/metrics.jsonl").size() == 6);
  std::vector<nlohmann::json> lines = metrics_steps(c + "/metrics.jsonl");
  check_steps(lines, 4, 6);
  for (size_t i = 0; i < lines.size(); ++i) {
    CHECK(lines[i]["loss"].get<double>() == run.lines[i + 3]["loss"].get<double>());
  }
  CHECK(bits_equal(weights_concat(run.a + "/final").values, weights_concat(c + "/final").values));
}

TEST_CASE("train resumes a two-device checkpoint on one device and under zero1 on three") {
  Uninterrupted run;
  struct Case {
    std::string name;
    std::vector<std::string> flags;
  };
  for (const Case& k : {Case{"one", {"--devices", "cpu:0"}},
                        Case{"zero1", {"--devices", "cpu:0,cpu:1,cpu:2", "--strategy", "zero1"}}}) {
    CAPTURE(k.name);
    std::string out = run.f.dir / k.name;
    std::vector<std::string> args = {"--resume", run.a + "/step-000003", "--out", out};
    args.insert(args.end(), k.flags.begin(), k.flags.end());
    CliResult r = train_cli(args);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find(k.flags[1]) != std::string::npos);  // the header names the devices
    std::vector<nlohmann::json> lines = metrics_steps(out + "/metrics.jsonl");
    check_steps(lines, 4, 6);
    for (size_t i = 0; i < lines.size(); ++i) {
      CAPTURE(i);
      double ours = lines[i]["loss"].get<double>(), ref = run.lines[i + 3]["loss"].get<double>();
      CHECK(std::abs(ours - ref) <= 1e-5 * std::abs(ref));
    }
    CHECK(train::checkpoint_read(out + "/final").state.step == 6);
    CHECK(weights_rel_l2(out + "/final", run.a + "/final") < 1e-5);
  }
}

TEST_CASE("train resumed with another batch size continues at the same token, or refuses") {
  TrainFiles f;  // about 3200 tokens: no epoch ends within these steps
  const std::string run = f.dir / "run";
  std::vector<std::string> args = {
      "--config",  f.config, "--data",       f.data, "--devices", "cpu:0", "--batch-size", "2",
      "--seq-len", "16",     "--save-every", "4",    "--steps",   "4",     "--out",        run};
  REQUIRE(train_cli(args).rc == 0);  // stops at token 4 x 2 x 16 = 128
  // 4-row batches: token 128 is batch 2; one step later the position is batch 3.
  CliResult r = train_cli(
      {"--resume", run + "/final", "--batch-size", "4", "--steps", "5", "--out", f.dir / "wider"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  train::Checkpoint c = train::checkpoint_read(f.dir / "wider/final");
  CHECK(c.state.data.epoch == 0);
  CHECK(c.state.data.index == 3);
  CHECK(c.state.tokens_seen == 128 + 64);
  // 3-row batches do not meet token 128: refused rather than moved.
  CliResult odd = train_cli(
      {"--resume", run + "/final", "--batch-size", "3", "--steps", "5", "--out", f.dir / "odd"});
  CHECK(odd.rc == 1);
  CHECK(odd.err_lines() == 1);
  CHECK(odd.err.find("token 128 of its epoch, which is not a boundary of batches of 3 x 16") !=
        std::string::npos);
  CHECK(!fs::exists(f.dir / "odd"));
}

TEST_CASE("train says so when a resumed run's --steps stretches the learning-rate schedule") {
  TrainFiles f;
  const std::string run = f.dir / "run";
  REQUIRE(train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0", "--batch-size",
                     "2", "--seq-len", "16", "--steps", "3", "--warmup", "1", "--out", run})
              .rc == 0);
  CliResult r = train_cli({"--resume", "last", "--out", run, "--steps", "6"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("note: --steps 6 changes the schedule's horizon from 3 steps") !=
        std::string::npos);
  // The same horizon says nothing.
  CliResult same = train_cli({"--resume", "last", "--out", run, "--steps", "6"});
  CHECK(same.out.find("note: --steps") == std::string::npos);
}

TEST_CASE("a resumed run under --schedule constant says nothing about the schedule's horizon") {
  TrainFiles f;
  const std::string run = f.dir / "run";
  REQUIRE(train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0", "--batch-size",
                     "2", "--seq-len", "16", "--steps", "3", "--warmup", "1", "--schedule",
                     "constant", "--out", run})
              .rc == 0);
  CliResult r = train_cli({"--resume", "last", "--out", run, "--steps", "6"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("horizon") == std::string::npos);
  // The learning rate did not move: a constant schedule has no horizon to stretch.
  const std::vector<nlohmann::json> lines = metrics_steps(run + "/metrics.jsonl");
  REQUIRE(lines.size() == 6);
  for (const nlohmann::json& j : lines) CHECK(j["lr"].get<double>() == 3e-3);
}

// `--resume auto` (and last) over a run directory whose checkpoint is damaged: the
// refusal names the entry and what is wrong with it, in one line, and writes nothing;
// a step-N that is a link out of the run directory is never followed.
TEST_CASE("train --resume auto or last over a damaged final/ says which older step it takes") {
  // It went on from step-000002 without a word, two steps of training lost unseen.
  TrainFiles f;
  const std::vector<std::string> args = {
      "--config",  f.config, "--data",  f.data, "--devices",    "cpu:0", "--batch-size", "2",
      "--seq-len", "16",     "--steps", "4",    "--save-every", "2",     "--eval-every", "0"};
  for (const std::string resume : {"auto", "last"}) {
    CAPTURE(resume);
    const std::string out = f.dir / ("run-" + resume);
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--out", out});
    REQUIRE(train_cli(a).rc == 0);  // step-000002 and final/ (step 4)
    REQUIRE(fs::is_directory(out + "/step-000002"));
    fs::remove(out + "/final/trainer_state.json");
    std::vector<std::string> again =
        resume == "auto" ? args : std::vector<std::string>{"--steps", "4"};
    again.insert(again.end(), {"--out", out, "--resume", resume});
    const CliResult r = train_cli(again);
    CAPTURE(r.out);
    CAPTURE(r.err);
    REQUIRE(r.rc == 0);
    CHECK(has(r.out, "note: " + out +
                         "/final has no trainer_state.json, so it is not a complete checkpoint: "
                         "the run goes on from the newest complete one instead\n"));
    CHECK(has(r.out, out + "/step-000002"));
    // A sound final/ says nothing of the kind.
    const CliResult quiet = train_cli(again);
    REQUIRE(quiet.rc == 0);
    CHECK_FALSE(has(quiet.out, "not a complete checkpoint"));
  }
}

TEST_CASE("train --resume auto names a damaged checkpoint and never follows a link out") {
  TrainFiles f;
  const std::string good = f.dir / "good";
  const std::vector<std::string> args = {"--config",  f.config, "--data",       f.data,
                                         "--devices", "cpu:0",  "--batch-size", "2",
                                         "--seq-len", "16",     "--steps",      "2"};
  // auto takes the command line that started the run; last takes the checkpoint's flags.
  auto train_into = [&](const std::string& out, const std::string& resume) {
    std::vector<std::string> a = resume == "auto" ? args : std::vector<std::string>{};
    a.insert(a.end(), {"--out", out, "--resume", resume});
    return train_cli(a);
  };
  REQUIRE(train_into(good, "auto").rc == 0);  // a fresh start: final/ at step 2
  // A copy of the good run with `damage` done to it, refused with `phrase`.
  int n = 0;
  auto refused = [&](const std::function<void(const std::string&)>& damage,
                     const std::string& phrase, const std::string& resume = "auto") {
    const std::string out = f.dir / ("run" + std::to_string(n++));
    fs::copy(good, out, fs::copy_options::recursive);
    damage(out);
    const std::vector<std::string> before = dir_list(out);
    const std::string metrics = file_read(out + "/metrics.jsonl");
    CliResult r = train_into(out, resume);
    INFO("out " << out << "\nstdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.rc == 1);
    CHECK(r.err_lines() == 1);
    CHECK(r.err.rfind("fanout: error: ", 0) == 0);
    CHECK(has(r.err, out + phrase));
    CHECK(dir_list(out) == before);  // nothing written
    CHECK(file_read(out + "/metrics.jsonl") == metrics);
  };
  auto only_final = [](const std::string& out) {
    for (const std::string& name : dir_list(out)) {
      if (name.rfind("step-", 0) == 0) fs::remove_all(out + "/" + name);
    }
  };
  // Damage no reader can take for a checkpoint: named, not "no checkpoint found".
  refused(
      [&](const std::string& out) {
        only_final(out);
        fs::remove(out + "/final/trainer_state.json");
      },
      "/final has no trainer_state.json, so it is not a complete checkpoint");
  refused(
      [&](const std::string& out) {
        only_final(out);
        fs::remove(out + "/final/trainer_state.json");
      },
      "/final has no trainer_state.json", "last");
  refused(
      [&](const std::string& out) {
        only_final(out);
        fs::remove(out + "/final/trainer_state.json");
        fs::create_directory(out + "/final/trainer_state.json");
      },
      "/final has a trainer_state.json that is not a file");
  refused(
      [&](const std::string& out) {
        only_final(out);
        fs::remove_all(out + "/final");
        file_write(out + "/final", "x");
      },
      "/final is not a directory");
  refused(
      [&](const std::string& out) {
        only_final(out);
        fs::remove_all(out + "/final");
        fs::create_symlink(out + "/absent", out + "/final");
      },
      "/final is a link to " + f.dir.path);
  // Damage inside a checkpoint: named by checkpoint_read.
  refused([&](const std::string& out) { file_write(out + "/final/trainer_state.json", "{"); },
          "/final: trainer_state.json");
  refused(
      [&](const std::string& out) {
        file_write(out + "/final/trainer_state.json", "{\"version\": 1}");
      },
      "/final: trainer_state.json: missing key \"step\"");
  refused([&](const std::string& out) { fs::remove(out + "/final/model.safetensors"); },
          "/final: missing model.safetensors");
  // A newer step that is a link to a complete checkpoint elsewhere.
  const std::string elsewhere = f.dir / "elsewhere";
  fs::copy(good + "/final", elsewhere, fs::copy_options::recursive);
  const std::vector<std::string> elsewhere_files = dir_list(elsewhere);
  for (const std::string& target : {elsewhere, std::string("../elsewhere")}) {
    CAPTURE(target);
    refused([&](const std::string& out) { fs::create_symlink(target, out + "/step-000009"); },
            "/step-000009 is a link to " + elsewhere + ", outside ");
  }
  CHECK(dir_list(elsewhere) == elsewhere_files);
  // A link inside the run directory is the run's own: followed.
  const std::string linked = f.dir / "linked";
  fs::copy(good, linked, fs::copy_options::recursive);
  fs::create_symlink("final", linked + "/step-000009");
  std::vector<std::string> more = args;
  more.back() = "3";  // --steps 3: one step past the checkpoint
  more.insert(more.end(), {"--out", linked, "--resume", "auto"});
  CliResult r = train_cli(more);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "resuming from " + linked + "/step-000009 (step 2)"));
  CHECK(metrics_steps(linked + "/metrics.jsonl").size() == 3);
}
