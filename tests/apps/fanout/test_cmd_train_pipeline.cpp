// fanout train --pp through the real binary: every schedule and stage count,
// and a 2 x 2 grid, train as one device does; --recompute changes no bit;
// checkpoints cross between pipelines and dp; the trace has each action on its
// stage's lane; bad pipeline flags are refused in one line each.

#include <doctest/doctest.h>

#include <filesystem>

#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

TEST_CASE(
    "train --pp: every schedule on 2, 3 and 4 stages, and 2 stages x 2 replicas (dp, zero1, "
    "zero2, overlap)") {
  TinyRun run;
  const std::vector<float> init = weights_all(run.init);
  const std::string single = run.dir / "single";
  train_ok(concat(run.train_args(single, 4), {"--devices", "cpu:0"}));
  const Outcome ref = outcome(single, init);
  for (const char* schedule : {"gpipe", "1f1b", "zb1"}) {
    for (const char* devices : {"cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2", "cpu:0,cpu:1,cpu:2,cpu:3"}) {
      const int K = static_cast<int>(std::string(devices).size() / 6 + 1);
      CAPTURE(schedule);
      CAPTURE(K);
      const std::string out = run.dir / (std::string(schedule) + std::to_string(K));
      CliResult r = run_fanout(
          concat(run.train_args(out, 4),
                 {"--devices", devices, "--pp", std::to_string(K), "--pp-schedule", schedule}));
      INFO("stderr: " << r.err);
      REQUIRE(r.rc == 0);
      CHECK(lines_with(r.out, "pipeline: " + std::to_string(K) + " stages x 1 replica, " + schedule)
                .size() == 1);
      check_same(outcome(out, init), ref);
    }
  }
  for (const char* strategy : {"dp", "zero1", "zero2"}) {
    for (const char* overlap : {"--no-overlap", "--overlap"}) {
      CAPTURE(strategy);
      CAPTURE(overlap);
      const std::string grid = run.dir / (std::string("grid-") + strategy + overlap);
      train_ok(concat(run.train_args(grid, 4),
                      {"--devices", "cpu:0,cpu:1,cpu:2,cpu:3", "--pp", "2", "--micro-batches", "3",
                       "--strategy", strategy, overlap}));
      check_same(outcome(grid, init), ref);
    }
  }
}

TEST_CASE("train --recompute changes no bit, under dp, overlap, zero2, zero3 and --pp") {
  TinyRun run;
  const std::vector<float> init = weights_all(run.init);
  for (std::vector<std::string> mode :
       {std::vector<std::string>{"--devices", "cpu:0,cpu:1"},
        std::vector<std::string>{"--devices", "cpu:0,cpu:1", "--overlap"},
        std::vector<std::string>{"--devices", "cpu:0,cpu:1", "--strategy", "zero2"},
        std::vector<std::string>{"--devices", "cpu:0,cpu:1", "--strategy", "zero3"},
        std::vector<std::string>{"--devices", "cpu:0,cpu:1", "--pp", "2", "--pp-schedule",
                                 "zb1"}}) {
    CAPTURE(mode.back());
    const std::string plain = run.dir / "plain", again = run.dir / "again";
    std::filesystem::remove_all(plain);
    std::filesystem::remove_all(again);
    train_ok(concat(run.train_args(plain, 3), mode));
    mode.push_back("--recompute");
    CliResult r = run_fanout(concat(run.train_args(again, 3), mode));
    REQUIRE(r.rc == 0);
    CHECK(lines_with(r.out, ", recompute |").size() == 1);
    CHECK(metrics_losses(again + "/metrics.jsonl") == metrics_losses(plain + "/metrics.jsonl"));
    CHECK(weights_all(again + "/final") == weights_all(plain + "/final"));
  }
}

TEST_CASE("train --pp: checkpoints cross between pipelines and dp on one device") {
  TinyRun run;
  check_resume_legs(
      run, {
               {{"--devices", "cpu:0,cpu:1", "--pp", "2"}, {"--devices", "cpu:0"}},
               {{"--devices", "cpu:0"},
                {"--devices", "cpu:0,cpu:1,cpu:2", "--pp", "3", "--pp-schedule", "zb1"}},
               {{"--devices", "cpu:0,cpu:1,cpu:2,cpu:3", "--pp", "4", "--pp-schedule", "gpipe"},
                {"--devices", "cpu:0,cpu:1", "--pp", "2"}},
               {{"--devices", "cpu:0,cpu:1,cpu:2,cpu:3", "--pp", "2", "--strategy", "zero2"},
                {"--devices", "cpu:0,cpu:1", "--strategy", "zero2"}},
           });
}

TEST_CASE("train --pp --trace: every action on its stage's lane") {
  TinyRun run;
  const std::string out = run.dir / "traced", trace = run.dir / "trace.json";
  train_ok(
      concat(run.train_args(out, 1), {"--devices", "cpu:0,cpu:1", "--pp", "2", "--micro-batches",
                                      "2", "--pp-schedule", "zb1", "--trace", trace}));
  const std::string text = file_read_regular(trace);
  for (const char* lane : {"cpu:0 stage 0", "cpu:1 stage 1"}) CHECK(has(text, lane));
  for (const char* action : {"\"F0\"", "\"F1\"", "\"I0\"", "\"I1\"", "\"W0\"", "\"W1\""})
    CHECK(has(text, action));
}

TEST_CASE("train --pp: bad pipeline flags are refused in one line") {
  TinyRun run;
  const std::string out = run.dir / "bad";
  auto refused = [&](std::vector<std::string> flags, const std::string& phrase) {
    CAPTURE(phrase);
    CliResult r = run_fanout(concat(run.train_args(out, 1), flags));
    check_fails(r.rc, r.err, phrase);
    CHECK(!std::filesystem::exists(out + "/final"));
  };
  const std::string four = "cpu:0,cpu:1,cpu:2,cpu:3";
  refused({"--devices", "cpu:0,cpu:1,cpu:2,cpu:3,cpu:4", "--pp", "5"},
          "--pp 5 is more stages than the model's 4 units");
  refused({"--devices", "cpu:0,cpu:1,cpu:2", "--pp", "2"}, "--pp 2 does not divide the 3 devices");
  refused({"--devices", "cpu:0,cpu:1", "--pp", "2", "--micro-batches", "0"}, "--micro-batches");
  refused({"--devices", "cpu:0,cpu:1", "--pp", "2", "--micro-batches", "7"},
          "--micro-batches 7 needs at least 7 rows per pipeline replica");
  refused({"--devices", four, "--pp", "2", "--micro-batches", "4"},
          "gives 3 to each of 2 replicas");
  refused({"--devices", "cpu:0,cpu:1", "--pp", "2", "--balance", "1,2"},
          "--balance sums to 3 layers, the model has 2");
  refused({"--devices", "cpu:0,cpu:1", "--pp", "2", "--balance", "2"},
          "--balance lists 1 stages, --pp is 2");
  refused({"--devices", "cpu:0,cpu:1", "--pp", "2", "--balance", "fast"},
          "--balance must be params, flops, time or decoder layers per stage");
  refused({"--devices", "cpu:0,cpu:1", "--pp", "2", "--pp-schedule", "1f2b"},
          "--pp-schedule must be gpipe, 1f1b or zb1, got '1f2b'");
  refused({"--devices", "cpu:0,cpu:1", "--pp", "2", "--strategy", "zero3"},
          "--pp 2 shares each stage among its replicas as --strategy dp, zero1 or zero2 does; it "
          "does not combine with --strategy zero3");
  refused({"--devices", four, "--pp", "2", "--strategy", "zero2", "--pp-schedule", "zb1"},
          "--pp-schedule zb1 computes the weight gradients apart from backward");
  refused({"--devices", four, "--pp", "2", "--tp", "2", "--strategy", "zero2"},
          "--tp 2 with --strategy zero2: tensor-parallel ranks sum part of their gradients");
  refused({"--devices", "cpu:0,cpu:1", "--pp", "2", "--loss-on", "output"},
          "--loss-on output does not combine with it");
  refused({"--devices", "cpu:0,cpu:1", "--micro-batches", "2"},
          "--micro-batches shapes a pipeline: give --pp K");
}

TEST_CASE("train --pp --balance: layers per stage, flops and time cut the model") {
  TinyRun run;
  for (const char* balance : {"0,2", "2,0", "flops", "time"}) {
    CAPTURE(balance);
    const std::string out = run.dir / (std::string("b") + balance[0]);
    std::filesystem::remove_all(out);
    CliResult r = run_fanout(concat(
        run.train_args(out, 1), {"--devices", "cpu:0,cpu:1", "--pp", "2", "--balance", balance}));
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    const auto line = lines_with(r.out, "pipeline: 2 stages");
    REQUIRE(line.size() == 1);
    if (std::string(balance) == "0,2") CHECK(has(line[0], "0 = unit 0 (embedding)"));
    if (std::string(balance) == "2,0") CHECK(has(line[0], "1 = unit 3 (head)"));
  }
}

TEST_CASE("train --pp: the small preset trains on 4 devices capped below what dp needs") {
  TempDir dir("fanout-pp-memory");
  auto run = [&](const std::string& name, std::vector<std::string> extra,
                 const char* cap = "200MiB") {
    std::vector<std::string> args = {"train",
                                     "--preset",
                                     "small",
                                     "--devices",
                                     "cpu:0,cpu:1,cpu:2,cpu:3",
                                     "--device-memory",
                                     cap,
                                     "--batch-size",
                                     "8",
                                     "--seq-len",
                                     "64",
                                     "--steps",
                                     "2",
                                     "--eval-every",
                                     "0",
                                     "--val-split",
                                     "0",
                                     "--save-every",
                                     "0",
                                     "--json",
                                     "--out",
                                     dir / name};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_fanout(args);
  };
  // dp: the whole model, its gradients and AdamW state on cpu:0 alone pass 200 MiB.
  CliResult dp = run("dp", {});
  check_fails(dp.rc, dp.err, "out of memory on cpu:0 (--device-memory 200.0 MiB)");
  for (const char* pp : {"4", "2"}) {
    CAPTURE(pp);
    CliResult r = run(std::string("pp") + pp, {"--pp", pp});
    INFO("stderr: " << r.err);
    CHECK(r.rc == 0);
    CHECK(metrics_losses(dir / (std::string("pp") + pp) + "/metrics.jsonl").size() == 2);
  }
  // 2 stages x 2 replicas at 110 MiB: zero1 keeps a stage's gradients whole on
  // each device (30 MiB) and runs out; zero2 keeps half of them.
  CliResult zero1 = run("zero1", {"--pp", "2", "--strategy", "zero1"}, "110MiB");
  check_fails(zero1.rc, zero1.err, "out of memory on cpu:");
  CHECK(has(zero1.err, "to fit, try --recompute, --strategy zero2"));
  CliResult zero2 = run("zero2", {"--pp", "2", "--strategy", "zero2"}, "110MiB");
  INFO("stderr: " << zero2.err);
  CHECK(zero2.rc == 0);
  CHECK(metrics_losses(dir / "zero2/metrics.jsonl").size() == 2);
}
