// ddp runs that fail or are stopped while training, through the real binary on
// loopback: a rank killed mid-run (through `fanout launch` and with ranks started
// by hand) ends every rank quickly with a line naming the dead rank, and Ctrl-C
// on the launcher checkpoints, exits 130 and leaves no process behind.
// The test hook FANOUT_TEST_KILL_RANK / FANOUT_TEST_KILL_STEP (apps/train/trainer.cpp)
// makes that rank SIGKILL itself at the start of that step.

#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <thread>

#include "apps/train/checkpoint.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {
namespace fs = std::filesystem;

const std::vector<std::string> kKillRank1AtStep2 = {"FANOUT_TEST_KILL_RANK=1",
                                                    "FANOUT_TEST_KILL_STEP=2"};

// An env entry no other process has: every process of one run inherits it.
std::string marker_env() {
  return "FANOUT_TEST_LAUNCH_MARKER=" + std::to_string(::getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// True once `path` holds at least one line, false after `timeout_s`.
bool wait_for_line(const std::string& path, double timeout_s, FanoutProcess& p) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline && !p.poll()) {
    if (file_read(path).find('\n') != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST_CASE("launch reports a killed ddp rank and the others stop naming it") {
  TinyRun run;
  std::string marker = marker_env();
  FanoutProcess launch(
      concat({"launch", "--nproc-per-node", "3", "--"},
             concat(run.train_args(run.dir / "out", 5), concat(kDdp, {"--timeout", "10"}))),
      concat(kKillRank1AtStep2, {marker}), run.dir.path, "launch");
  REQUIRE(launch.wait(60));
  std::string err = launch.err();
  INFO("stderr: " << err);
  CHECK(launch.rc() == 1);
  CHECK(launch.seconds() < 30);
  CHECK(lines_with(err, "fanout launch: rank 1 was killed by signal 9").size() == 1);
  CHECK(lines_with(err, "rank 0: ").size() == 1);
  CHECK(lines_with(err, "rank 2: ").size() == 1);
  CHECK(lines_with(err, "rank 1 died").size() == 2);
  CHECK(lines_with(err, "").size() == 3);
  check_no_process_left(marker);
  // Step 1 finished everywhere before rank 1 died; step 2 never did.
  CHECK(metrics_last_step(run.dir / "out/metrics.jsonl") == 1);
  CHECK_FALSE(fs::exists(run.dir / "out/final"));
}

TEST_CASE("ddp ranks started by hand stop within the timeout when a rank is killed") {
  TinyRun run;
  const double timeout = 10;
  int port = free_port();
  std::vector<std::unique_ptr<FanoutProcess>> ranks;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::string> args = concat(run.train_args(run.dir / "out", 5),
                                           concat(kDdp, {"--timeout", std::to_string(timeout)}));
    ranks.push_back(std::make_unique<FanoutProcess>(args,
                                                    concat(rank_env(r, 3, port), kKillRank1AtStep2),
                                                    run.dir.path, "rank" + std::to_string(r)));
  }
  REQUIRE(wait_all({ranks[0].get(), ranks[1].get(), ranks[2].get()}, 60));
  CHECK(ranks[1]->rc() == 128 + SIGKILL);
  for (int r : {0, 2}) {
    CAPTURE(r);
    std::string err = ranks[r]->err();
    INFO("stderr: " << err);
    CHECK(ranks[r]->rc() == 1);
    CHECK(lines_with(err, "").size() == 1);
    CHECK(lines_with(err, "rank " + std::to_string(r) + ": ").size() == 1);
    CHECK(lines_with(err, "rank 1 died").size() == 1);
    // Well within it: the rendezvous sees rank 1 die, whatever gloo makes of it.
    CHECK(ranks[r]->seconds() - ranks[1]->seconds() < timeout / 2);
  }
}

TEST_CASE("launch on Ctrl-C checkpoints and exits 130 and the run resumes in one process") {
  TinyRun run;
  std::string out = run.dir / "out", marker = marker_env();
  FanoutProcess launch(
      concat({"launch", "--nproc-per-node", "2", "--"}, concat(run.train_args(out, 100000), kDdp)),
      {marker}, run.dir.path, "launch");
  REQUIRE(wait_for_line(out + "/metrics.jsonl", 60, launch));
  launch.kill(SIGINT);  // the launcher only: it forwards to the ranks
  REQUIRE(launch.wait(30));
  INFO("stdout: " << launch.out() << "\nstderr: " << launch.err());
  CHECK(launch.rc() == 130);
  CHECK(launch.seconds() < 60);
  CHECK(launch.err().empty());
  check_no_process_left(marker);

  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(out)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0) steps.push_back(name);
  }
  REQUIRE(steps.size() == 1);
  train::Checkpoint c = train::checkpoint_read(out + "/" + steps[0]);
  int64_t step = c.state.step;
  CHECK(steps[0] == train::checkpoint_step_name(step));
  CHECK(metrics_last_step(out + "/metrics.jsonl") == step);
  CHECK(lines_with(launch.out(), "interrupted at step " + std::to_string(step)).size() == 1);

  CliResult r =
      run_fanout({"train", "--resume", "last", "--out", out, "--steps", std::to_string(step + 2),
                  "--strategy", "dp", "--devices", "cpu:0", "--json"});
  INFO("resume stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(metrics_last_step(out + "/metrics.jsonl") == step + 2);
  CHECK(metrics_losses(out + "/metrics.jsonl").size() == static_cast<size_t>(step + 2));
  CHECK(train::checkpoint_read(out + "/final").state.step == step + 2);
}
