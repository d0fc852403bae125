// `fanout train` through the real binary: what a run records (metrics.jsonl fields,
// the warmup + cosine learning rate, checkpoints, --json), the default run on the
// embedded corpus, and step-for-step agreement with the PyTorch reference
// (tests/reference/llama_ref.py) on three CPU devices. Resume: test_cmd_train_resume.cpp;
// SIGKILL, SIGINT and divergence: test_cmd_train_stops.cpp; bad input:
// test_cmd_train_errors.cpp.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "apps/data/data_loader.h"
#include "apps/data/token_file.h"
#include "apps/train/checkpoint.h"
#include "models/llama_model.h"
#include "models/safetensors.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

// The tiny config on two CPU devices, 4 rows of 16 tokens, plus `extra`.
std::vector<std::string> tiny_run(const TrainFiles& f, const std::string& out,
                                  std::vector<std::string> extra) {
  std::vector<std::string> args = {"--config",  f.config,      "--data",       f.data,
                                   "--devices", "cpu:0,cpu:1", "--batch-size", "4",
                                   "--seq-len", "16",          "--out",        out};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

double rel_diff(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}
}  // namespace

// --- what a run records ---------------------------------------------------------

TEST_CASE("train writes one metrics line per step with loss lr grad_norm speed and peak memory") {
  TrainFiles f;
  std::string out = f.dir / "run";
  CliResult r =
      train_cli(tiny_run(f, out, {"--steps", "5", "--save-every", "0", "--val-split", "0"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.empty());
  std::vector<nlohmann::json> lines = metrics_read(out + "/metrics.jsonl");
  REQUIRE(lines.size() == 5);  // nothing held out (--val-split 0): no held-out lines
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& j = lines[i];
    CAPTURE(j.dump());
    REQUIRE(j.is_object());
    CHECK(j["step"].get<int64_t>() == static_cast<int64_t>(i) + 1);
    CHECK(std::isfinite(j["loss"].get<double>()));
    CHECK(j["loss"].get<double>() > 0);
    CHECK(j["lr"].get<double>() > 0);
    CHECK(std::isfinite(j["grad_norm"].get<double>()));
    CHECK(j["grad_norm"].get<double>() > 0);
    CHECK(std::isfinite(j["tokens_per_s"].get<double>()));
    CHECK(j["tokens_per_s"].get<double>() > 0);
    CHECK(j["tokens"].get<int64_t>() == (static_cast<int64_t>(i) + 1) * 4 * 16);
    const nlohmann::json& peak = j["peak_bytes"];
    REQUIRE(peak.is_object());
    CHECK(peak.size() == 2);
    for (const char* d : {"cpu:0", "cpu:1"}) {
      CAPTURE(d);
      REQUIRE(peak.contains(d));
      CHECK(peak[d].is_number_integer());
      CHECK(peak[d].get<int64_t>() > 0);
    }
  }
  // A random init over 259 ids starts near log(259).
  CHECK(std::abs(lines[0]["loss"].get<double>() - std::log(259.0)) < 0.3);
}

TEST_CASE("train follows the linear warmup then cosine learning rate formula") {
  TrainFiles f;
  std::string out = f.dir / "run";
  const double lr = 2e-3, min_lr = 2e-4;
  const int64_t warmup = 3, steps = 9;
  CliResult r = train_cli(
      tiny_run(f, out,
               {"--steps", std::to_string(steps), "--warmup", std::to_string(warmup), "--lr",
                "2e-3", "--min-lr", "2e-4", "--schedule", "cosine", "--save-every", "0"}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  std::vector<nlohmann::json> lines = metrics_steps(out + "/metrics.jsonl");
  REQUIRE(lines.size() == static_cast<size_t>(steps));
  for (int64_t s = 1; s <= steps; ++s) {
    double expected =
        s <= warmup
            ? lr * s / warmup
            : min_lr +
                  0.5 * (lr - min_lr) *
                      (1 + std::cos(M_PI * (s - warmup) / static_cast<double>(steps - warmup)));
    CAPTURE(s);
    CHECK(lines[s - 1]["lr"].get<double>() == doctest::Approx(expected).epsilon(1e-12));
  }
  CHECK(lines.back()["lr"].get<double>() == doctest::Approx(min_lr).epsilon(1e-12));

  // constant: warmup, then the peak for good
  std::string out2 = f.dir / "constant";
  r = train_cli(tiny_run(f, out2,
                         {"--steps", "5", "--warmup", "2", "--lr", "2e-3", "--schedule", "constant",
                          "--save-every", "0"}));
  REQUIRE(r.rc == 0);
  lines = metrics_steps(out2 + "/metrics.jsonl");
  REQUIRE(lines.size() == 5);
  const double constant[] = {1e-3, 2e-3, 2e-3, 2e-3, 2e-3};
  for (size_t i = 0; i < 5; ++i) {
    CHECK(lines[i]["lr"].get<double>() == doctest::Approx(constant[i]).epsilon(1e-12));
  }
}

TEST_CASE("train with save-every 0 writes only the final checkpoint") {
  TrainFiles f;
  std::string out = f.dir / "run";
  CliResult r = train_cli(tiny_run(f, out, {"--steps", "4", "--save-every", "0"}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(dir_list(out) == std::vector<std::string>{"curves.svg", "final", "metrics.jsonl"});
  CHECK(dir_list(out + "/final") ==
        std::vector<std::string>{"config.json", "model.safetensors", "optimizer.safetensors",
                                 "tokenizer.json", "trainer_state.json"});
  train::Checkpoint c = train::checkpoint_read(out + "/final");
  CHECK(c.state.step == 4);
  CHECK(c.state.tokens_seen == 4 * 4 * 16);
  CHECK(c.config.hidden_size == 32);
}

TEST_CASE("train with save-every N checkpoints every N steps and at the end") {
  TrainFiles f;
  std::string out = f.dir / "run";
  CliResult r = train_cli(tiny_run(f, out, {"--steps", "7", "--save-every", "3"}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(dir_list(out) == std::vector<std::string>{"curves.svg", "final", "metrics.jsonl",
                                                  "step-000003", "step-000006"});
  CHECK(train::checkpoint_read(out + "/step-000003").state.step == 3);
  CHECK(train::checkpoint_read(out + "/step-000006").state.step == 6);
  CHECK(train::checkpoint_read(out + "/final").state.step == 7);
}

TEST_CASE("a run's last step is saved as final/ alone, and resume last and auto continue from it") {
  TrainFiles f;
  std::string out = f.dir / "run";
  // The default --save-every (100), as `fanout train` with no flags saves.
  CliResult r = train_cli(tiny_run(f, out, {"--steps", "200"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(dir_list(out) ==
        std::vector<std::string>{"curves.svg", "final", "metrics.jsonl", "step-000100"});
  CHECK(train::checkpoint_read(out + "/final").state.step == 200);
  CHECK(train::checkpoint_read(out + "/step-000100").state.step == 100);
  r = train_cli({"--resume", "last", "--out", out, "--steps", "203", "--save-every", "1"});
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "resumed from " + out + "/final"));
  CHECK(dir_list(out) == std::vector<std::string>{"curves.svg", "final", "metrics.jsonl",
                                                  "step-000100", "step-000201", "step-000202"});
  CHECK(train::checkpoint_read(out + "/final").state.step == 203);
  r = train_cli({"--resume", "auto", "--out", out, "--steps", "204"});
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "resuming from " + out + "/final (step 203)"));
  CHECK(train::checkpoint_read(out + "/final").state.step == 204);
  CHECK(metrics_steps(out + "/metrics.jsonl").size() == 204);
}

TEST_CASE("train --json prints a summary object as the last stdout line") {
  TrainFiles f;
  std::string out = f.dir / "run";
  CliResult r = train_cli(tiny_run(f, out, {"--steps", "3", "--save-every", "0", "--json"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  nlohmann::json j = last_json_line(r.out);
  REQUIRE(j.is_object());
  CHECK(j["steps"].get<int64_t>() == 3);
  CHECK(j["out"].get<std::string>() == out);
  CHECK(j["checkpoint"].get<std::string>() == out + "/final");
  std::vector<nlohmann::json> lines = metrics_steps(out + "/metrics.jsonl");
  REQUIRE(lines.size() == 3);
  CHECK(j["loss"].get<double>() == lines.back()["loss"].get<double>());
  CHECK(r.out.find("sample:") == std::string::npos);
  CHECK(r.out.find("step 1/3") == std::string::npos);  // no progress lines with --json
}

TEST_CASE("train with val-data logs the held-out loss fanout eval gives at eval-every steps") {
  TrainFiles f;
  std::string out = f.dir / "run";
  CliResult r = train_cli(
      tiny_run(f, out, {"--val-data", f.data, "--steps", "4", "--eval-every", "2", "--json"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  std::vector<nlohmann::json> val;
  for (const nlohmann::json& j : metrics_read(out + "/metrics.jsonl")) {
    if (j.contains("val_loss")) val.push_back(j);
  }
  REQUIRE(val.size() == 2);  // step 2, and the end (step 4)
  CHECK(val[0]["step"].get<int64_t>() == 2);
  CHECK(val[1]["step"].get<int64_t>() == 4);
  nlohmann::json summary = last_json_line(r.out);
  REQUIRE(summary.is_object());
  CHECK(summary["val_loss"].get<double>() == val[1]["val_loss"].get<double>());
  // The end-of-run value is what `fanout eval` reports for the final checkpoint
  // over the whole file (train evaluates every held-out batch unless capped).
  CliResult e = run_fanout({"eval", "--checkpoint", out + "/final", "--data", f.data,
                            "--batch-size", "4", "--seq-len", "16", "--json"});
  REQUIRE(e.rc == 0);
  double ours = val[1]["val_loss"].get<double>();
  CHECK(rel_diff(ours, last_json_line(e.out)["loss"].get<double>()) < 1e-6);
}

// --- the default run --------------------------------------------------------------

TEST_CASE("train on the embedded corpus reports held-out loss and unigram entropy and a sample") {
  TrainFiles f;
  std::string out = f.dir / "run";
  CliResult r = train_cli({"--steps", "5", "--eval-every", "0", "--out", out});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("embedded default corpus") != std::string::npos);
  CHECK(r.out.find("held-out loss") != std::string::npos);
  CHECK(r.out.find("unigram entropy") != std::string::npos);
  size_t sample = r.out.find("\nsample:\n  ");
  CHECK(sample != std::string::npos);
  CHECK(fs::is_directory(out + "/final"));
  // The held-out loss is recorded after the last step, and the model has learnt a little.
  std::vector<nlohmann::json> lines = metrics_read(out + "/metrics.jsonl");
  REQUIRE(lines.size() == 6);
  CHECK(lines.back()["step"].get<int64_t>() == 5);
  REQUIRE(lines.back().contains("val_loss"));
  double val = lines.back()["val_loss"].get<double>();
  CHECK(std::isfinite(val));
  CHECK(val < std::log(259.0));
}

// --- the PyTorch reference ----------------------------------------------------------

TEST_CASE("train matches the PyTorch reference loss grad_norm and weight update on three devices") {
  TrainFiles f;
  const int64_t B = 6, T = 16, K = 3;
  std::string init = f.dir / "init", out = f.dir / "out", ref = f.dir / "ref";
  std::string batch_file = f.dir / "batches.safetensors", log;
  REQUIRE_MESSAGE(
      reference_run("init --config " + f.config + " --seed 3 --out " + init, f.dir.path, log) == 0,
      log);
  CliResult r = train_cli(
      {"--init",         init,       "--data",    f.data, "--devices",    "cpu:0,cpu:1,cpu:2",
       "--batch-size",   "6",        "--seq-len", "16",   "--steps",      "3",
       "--schedule",     "constant", "--warmup",  "0",    "--lr",         "1e-3",
       "--beta1",        "0.9",      "--beta2",   "0.95", "--eps",        "1e-8",
       "--weight-decay", "0.1",      "--clip",    "1.0",  "--save-every", "0",
       "--out",          out});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);

  // The batches fanout read: packing on, no shuffle.
  data::TokenData data = data::token_file_load(f.data);
  data::DataLoader loader(data, B, T, true, false, 0, models::kIgnoreIndex);
  std::vector<data::Batch> batches;
  for (int64_t k = 0; k < K; ++k) batches.push_back(loader.next());
  CHECK(batches[1].inputs[0] == data.tokens[B * T]);
  CHECK(batches[2].targets.back() == data.tokens[3 * B * T]);
  std::vector<models::SafetensorsTensor> tensors;
  for (int64_t k = 0; k < K; ++k) {
    tensors.push_back(
        {"input_ids_" + std::to_string(k), DType::i32, {B, T}, batches[k].inputs.data()});
    tensors.push_back(
        {"targets_" + std::to_string(k), DType::i32, {B, T}, batches[k].targets.data()});
  }
  models::safetensors_write(batch_file, tensors);
  REQUIRE_MESSAGE(reference_run("train --checkpoint " + init + " --batch " + batch_file +
                                    " --steps 3 --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 "
                                    "--weight-decay 0.1 --clip 1.0 --out " +
                                    ref,
                                f.dir.path, log) == 0,
                  log);

  std::vector<nlohmann::json> ours = metrics_steps(out + "/metrics.jsonl");
  std::vector<nlohmann::json> theirs = metrics_steps(ref + "/metrics.jsonl");
  REQUIRE(ours.size() == K);
  REQUIRE(theirs.size() == K);
  for (int64_t k = 0; k < K; ++k) {
    CAPTURE(k);
    CAPTURE(ours[k].dump());
    CAPTURE(theirs[k].dump());
    CHECK(ours[k]["step"] == theirs[k]["step"]);
    CHECK(rel_diff(ours[k]["loss"].get<double>(), theirs[k]["loss"].get<double>()) < 1e-4);
    CHECK(rel_diff(ours[k]["grad_norm"].get<double>(), theirs[k]["grad_norm"].get<double>()) <
          1e-4);
  }
  // Clipping was active (otherwise --clip would go untested).
  CHECK(theirs[0]["grad_norm"].get<double>() > 1.0);

  // The update, over every tensor: relative L2 of (ours - init) against (theirs - init).
  std::map<std::string, std::vector<float>> start, mine, torch;
  for (HostTensor& t : weights_read(init)) start[t.name] = std::move(t.data);
  for (HostTensor& t : weights_read(out + "/final")) mine[t.name] = std::move(t.data);
  for (HostTensor& t : weights_read(ref)) torch[t.name] = std::move(t.data);
  REQUIRE(mine.size() == start.size());
  REQUIRE(torch.size() == start.size());
  double diff2 = 0, ref2 = 0;
  for (const auto& [name, w0] : start) {
    CAPTURE(name);
    REQUIRE(mine.count(name));
    REQUIRE(torch.count(name));
    REQUIRE(mine[name].size() == w0.size());
    REQUIRE(torch[name].size() == w0.size());
    for (size_t i = 0; i < w0.size(); ++i) {
      double a = double(mine[name][i]) - w0[i], b = double(torch[name][i]) - w0[i];
      diff2 += (a - b) * (a - b), ref2 += b * b;
    }
  }
  REQUIRE(ref2 > 0);
  CHECK(std::sqrt(diff2 / ref2) < 2e-3);
}
