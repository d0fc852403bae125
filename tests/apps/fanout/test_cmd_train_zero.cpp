// zero1, zero2 and zero3 through the real binary: in one process and under
// `fanout launch` (one rank per CPU device, Gloo), every run trains what one
// device trains (per-step loss and the weight update), and checkpoints do not
// depend on the strategy or the device count: zero3 on 4 devices resumes under
// dp on 1 and the other way round, as an uninterrupted run continues.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

TEST_CASE("zero1 zero2 zero3 on 2 and 3 processes train as one device") {
  TinyRun run;
  std::vector<float> init = weights_all(run.init);
  std::string single = run.dir / "single";
  CliResult r = run_fanout(concat(run.train_args(single, 3), {"--devices", "cpu:0"}));
  INFO("single stderr: " << r.err);
  REQUIRE(r.rc == 0);
  Outcome ref = outcome(single, init);
  CHECK(relative_l2(ref.update, std::vector<float>(init.size(), 0.0f)) > 0);
  for (const char* strategy : {"zero1", "zero2", "zero3"}) {
    for (int n : {2, 3}) {
      CAPTURE(strategy);
      CAPTURE(n);
      std::string out = run.dir / (std::string(strategy) + "-" + std::to_string(n));
      r = run_fanout(
          concat({"launch", "--nproc-per-node", std::to_string(n), "--"},
                 concat(run.train_args(out, 3), {"--strategy", strategy, "--devices", "cpu"})));
      INFO("launch stdout: " << r.out << "\nlaunch stderr: " << r.err);
      REQUIRE(r.rc == 0);
      CHECK(lines_with(r.out, std::to_string(n) + " processes (gloo").size() == 1);
      CHECK(lines_with(r.out, std::string("| ") + strategy).size() == 1);
      check_same(outcome(out, init), ref);
    }
  }
}

TEST_CASE("zero1 zero2 zero3 across 2 and 3 processes in bf16 train as one bf16 device") {
  TinyRun run;
  std::vector<float> init = weights_all(run.init);
  const std::vector<std::string> bf16 = {"--precision", "bf16"};
  std::string single = run.dir / "single";
  CliResult r = run_fanout(concat(run.train_args(single, 3), concat(bf16, {"--devices", "cpu:0"})));
  REQUIRE(r.rc == 0);
  Outcome ref = outcome(single, init);
  for (const char* strategy : {"zero1", "zero2", "zero3"}) {
    for (int n : {2, 3}) {
      CAPTURE(strategy);
      CAPTURE(n);
      std::string out = run.dir / (std::string(strategy) + std::to_string(n));
      r = run_fanout(concat({"launch", "--nproc-per-node", std::to_string(n), "--"},
                            concat(run.train_args(out, 3),
                                   concat(bf16, {"--strategy", strategy, "--devices", "cpu"}))));
      INFO("launch stderr: " << r.err);
      REQUIRE(r.rc == 0);
      // bf16 at its tolerance (as ddp's bf16 test): sums over rows in another order,
      // and a last-bit change before a bf16 store moves that value by up to 2^-8.
      check_same(outcome(out, init), ref, 1e-4, 1e-2, 1e-3);
    }
  }
}

TEST_CASE("zero3 across more processes than rows is refused with one line") {
  TinyRun run;
  // The tiny run's batch has 6 rows: a seventh rank would have none.
  CliResult r = run_fanout(concat(
      {"launch", "--nproc-per-node", "7", "--"},
      concat(run.train_args(run.dir / "out", 1), {"--strategy", "zero3", "--devices", "cpu"})));
  INFO("stderr: " << r.err);
  CHECK(r.rc != 0);
  CHECK(r.err.find("zero3 across 7 processes needs at least 7 rows") != std::string::npos);
}

TEST_CASE("checkpoints cross strategies: zero3 on 4 devices resumes under dp on 1 and back") {
  TinyRun run;
  std::vector<float> init = weights_all(run.init);
  auto train = [&](const std::string& out, int64_t steps, std::vector<std::string> extra) {
    CliResult r = run_fanout(concat(run.train_args(out, steps), extra));
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
  };
  std::string straight = run.dir / "straight";
  train(straight, 5, {"--devices", "cpu:0"});
  Outcome ref = outcome(straight, init);

  // 3 steps of zero3 on 4 devices, then 2 of dp on one device.
  std::string z = run.dir / "z";
  train(z, 3, {"--strategy", "zero3", "--devices", "cpu:0,cpu:1,cpu:2,cpu:3"});
  CliResult r = run_fanout({"train", "--resume", z + "/final", "--steps", "5", "--strategy", "dp",
                            "--devices", "cpu:0"});
  INFO("resume stderr: " << r.err);
  REQUIRE(r.rc == 0);
  check_same(outcome(z, init), ref);

  // 3 steps of dp on one device, then 2 of zero3 on 3 devices and zero2 on 2.
  for (const char* strategy : {"zero3", "zero2"}) {
    CAPTURE(strategy);
    std::string d = run.dir / (std::string("d-") + strategy);
    train(d, 3, {"--devices", "cpu:0"});
    r = run_fanout({"train", "--resume", d + "/final", "--steps", "5", "--strategy", strategy,
                    "--devices",
                    std::string(strategy) == "zero3" ? "cpu:0,cpu:1,cpu:2" : "cpu:0,cpu:1"});
    INFO("resume stderr: " << r.err);
    REQUIRE(r.rc == 0);
    check_same(outcome(d, init), ref);
  }
}

TEST_CASE("several devices per process under a launcher are refused with one line") {
  TinyRun run;
  const std::string out = run.dir / "out";
  CliResult r =
      run_fanout(concat({"launch", "--nproc-per-node", "2", "--"},
                        concat(run.train_args(out, 1),
                               {"--strategy", "zero2", "--devices", "cpu:0,cpu:1,cpu:2,cpu:3"})));
  INFO("stderr: " << r.err);
  CHECK(r.rc != 0);
  CHECK(r.err.find("several devices per process are not supported with several processes); got 4 "
                   "for 2 local ranks") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out + "/final"));
}
