// Fault tolerance as torchrun's elastic agent gives it, through the real binary
// on loopback with CPU ranks: `fanout launch --max-restarts N` restarts every rank
// after one is killed and `train --resume auto` continues from the newest
// checkpoint, ending with the weights of a run that was never interrupted; without
// restarts left the launch fails naming the rank. `--resume auto` on its own starts
// fresh, resumes or refuses a directory that is not a run's; the launcher refuses
// what it cannot restart, and sets the job's variables for every rank.
// The test kills a rank from outside (SIGKILL, found among the launcher's children).

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
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
using Clock = std::chrono::steady_clock;

// Steps of every restarted run: enough that a kill after the step-4 checkpoint
// lands while the ranks still train, even when the machine is busy.
constexpr int64_t kSteps = 30;

// An env entry no other process has: every process of one run inherits it.
std::string marker_env() {
  return "FANOUT_TEST_RESTART_MARKER=" + std::to_string(::getpid()) + "-" +
         std::to_string(Clock::now().time_since_epoch().count());
}

// `args` with the value after `flag` replaced.
std::vector<std::string> with_value(std::vector<std::string> args, const std::string& flag,
                                    const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) args[i + 1] = value;
  return args;
}

// The ddp train command every restart test runs: checkpoints every 2 steps.
std::vector<std::string> restart_train(const TinyRun& run, const std::string& out) {
  return concat(with_value(run.train_args(out, kSteps), "--save-every", "2"),
                {"--strategy", "ddp", "--devices", "cpu", "--resume", "auto", "--timeout", "20"});
}

// NAME=value entries of a process's environment (empty once it is gone).
std::map<std::string, std::string> environment_of(pid_t pid) {
  std::map<std::string, std::string> env;
  std::string text = file_read("/proc/" + std::to_string(pid) + "/environ");
  std::istringstream in(text);
  for (std::string entry; std::getline(in, entry, '\0');) {
    size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

// The launcher's children (its ranks), from /proc/<pid>/task/*/children.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::istringstream in(file_read(task.path().string() + "/children"));
    for (long child; in >> child;) out.push_back(static_cast<pid_t>(child));
  }
  return out;
}

// The pid of the launcher's rank `rank` of attempt `restart` (FANOUT_RESTART_COUNT),
// once it runs; -1 after `timeout_s` or once the launcher has exited.
pid_t wait_for_rank(FanoutProcess& launch, int rank, int restart, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (Clock::now() < deadline && !launch.poll()) {
    for (pid_t child : children_of(launch.pid())) {
      std::map<std::string, std::string> env = environment_of(child);
      if (env["RANK"] == std::to_string(rank) &&
          env["FANOUT_RESTART_COUNT"] == std::to_string(restart))
        return child;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

// True once `path` exists, false after `timeout_s` or once the launcher has exited.
bool wait_for_path(const std::string& path, FanoutProcess& launch, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (Clock::now() < deadline && !launch.poll()) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool is_hex(const std::string& s, size_t n) {
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// An uninterrupted launch of the same run: the weights and losses to reproduce.
struct Reference {
  std::vector<float> weights;
  std::vector<double> losses;
  Reference(const TinyRun& run, const std::string& out) {
    FanoutProcess launch(concat({"launch", "--nproc-per-node", "2", "--"}, restart_train(run, out)),
                         {}, run.dir.path, "reference");
    REQUIRE(launch.wait(120));
    INFO("reference stdout: " << launch.out() << "\nstderr: " << launch.err());
    REQUIRE(launch.rc() == 0);
    CHECK(lines_with(launch.out(), "no checkpoint in " + out + ": starting fresh").size() == 1);
    weights = weights_all(out + "/final");
    losses = metrics_losses(out + "/metrics.jsonl");
    REQUIRE(losses.size() == static_cast<size_t>(kSteps));
  }
};
}  // namespace

// --- restarts -----------------------------------------------------------------------

TEST_CASE("launch --max-restarts 1 restarts a killed rank and ends as an uninterrupted run") {
  TinyRun run;
  Reference ref(run, run.dir / "reference");
  const std::string out = run.dir / "out", marker = marker_env();
  FanoutProcess launch(concat({"launch", "--nproc-per-node", "2", "--max-restarts", "1", "--"},
                              restart_train(run, out)),
                       {marker, "FANOUT_JOB_SECRET"}, run.dir.path,
                       "launch");  // no secret given: generated
  pid_t first = wait_for_rank(launch, 1, 0, 60);
  REQUIRE(first > 0);
  std::map<std::string, std::string> env0 = environment_of(first);
  REQUIRE(wait_for_path(out + "/step-000004", launch, 120));
  REQUIRE(::kill(first, SIGKILL) == 0);
  pid_t second = wait_for_rank(launch, 1, 1, 60);
  REQUIRE(second > 0);
  std::map<std::string, std::string> env1 = environment_of(second);
  REQUIRE(launch.wait(120));
  std::string err = launch.err(), stdout_text = launch.out();
  INFO("stdout: " << stdout_text << "\nstderr: " << err);
  CHECK(launch.rc() == 0);
  CHECK(lines_with(err,
                   "fanout launch: rank 1 was killed by signal 9 (Killed); restarting every "
                   "rank (restart 1 of 1)")
            .size() == 1);
  CHECK(lines_with(err, "fanout launch: ").size() == 1);
  check_no_process_left(marker);

  // Each attempt: the job's variables, a secret of its own, its restart count.
  for (auto* env : {&env0, &env1}) {
    CHECK((*env)["FANOUT_LAUNCHER"] == "fanout-launch");
    CHECK((*env)["FANOUT_MAX_RESTARTS"] == "1");
    CHECK(is_hex((*env)["FANOUT_JOB_SECRET"], 32));
  }
  CHECK(env0["FANOUT_RESTART_COUNT"] == "0");
  CHECK(env1["FANOUT_RESTART_COUNT"] == "1");
  CHECK(env0["FANOUT_JOB_SECRET"] != env1["FANOUT_JOB_SECRET"]);

  // The first attempt started fresh; the second resumed from a checkpoint at or past step 4.
  CHECK(lines_with(stdout_text, "no checkpoint in " + out + ": starting fresh").size() == 1);
  std::vector<std::string> resumed = lines_with(stdout_text, "resuming from " + out + "/step-");
  REQUIRE(resumed.size() == 1);
  const int64_t step = std::stoll(resumed[0].substr(resumed[0].rfind("(step ") + 6));
  CHECK(step >= 4);
  CHECK(step % 2 == 0);
  CHECK(
      has(resumed[0], train::checkpoint_step_name(step) + " (step " + std::to_string(step) + ")"));

  // Bit-identical weights, and the same loss at every step, each logged once.
  CHECK(bits_equal(weights_all(out + "/final"), ref.weights));
  CHECK(metrics_losses(out + "/metrics.jsonl") == ref.losses);
  CHECK(train::checkpoint_read(out + "/final").state.step == kSteps);
}

TEST_CASE("launch without restarts left fails naming the killed rank") {
  TinyRun run;
  SUBCASE("--max_restarts 0 (torchrun's spelling; the default)") {
    const std::string out = run.dir / "out", marker = marker_env();
    FanoutProcess launch(
        concat({"launch", "--nproc-per-node", "2", "--max_restarts", "0", "--grace", "5", "--"},
               restart_train(run, out)),
        {marker}, run.dir.path, "launch");
    REQUIRE(wait_for_path(out + "/step-000004", launch, 120));
    pid_t rank1 = wait_for_rank(launch, 1, 0, 30);
    REQUIRE(rank1 > 0);
    REQUIRE(::kill(rank1, SIGKILL) == 0);
    REQUIRE(launch.wait(60));
    std::string err = launch.err();
    INFO("stderr: " << err);
    CHECK(launch.rc() == 1);
    CHECK(lines_with(err,
                     "fanout launch: rank 1 was killed by signal 9 (Killed); stopping the "
                     "other ranks")
              .size() == 1);
    CHECK(lines_with(err, "restart").empty());
    CHECK_FALSE(fs::exists(out + "/final"));
    check_no_process_left(marker);
  }
  SUBCASE("--max-restarts 1 and two kills: one restart, then the launch fails") {
    // A secret from the environment is every attempt's.
    const std::string out = run.dir / "out", marker = marker_env();
    const std::string secret = "0123456789abcdef0123456789abcdef";
    FanoutProcess launch(
        concat({"launch", "--nproc-per-node", "2", "--max-restarts", "1", "--grace", "5", "--"},
               restart_train(run, out)),
        {marker, "FANOUT_JOB_SECRET=" + secret}, run.dir.path, "launch");
    REQUIRE(wait_for_path(out + "/step-000004", launch, 120));
    pid_t first = wait_for_rank(launch, 1, 0, 30);
    REQUIRE(first > 0);
    CHECK(environment_of(first)["FANOUT_JOB_SECRET"] == secret);
    REQUIRE(::kill(first, SIGKILL) == 0);
    pid_t second = wait_for_rank(launch, 1, 1, 60);
    REQUIRE(second > 0);
    CHECK(environment_of(second)["FANOUT_JOB_SECRET"] == secret);
    REQUIRE(::kill(second, SIGKILL) == 0);
    REQUIRE(launch.wait(60));
    std::string err = launch.err();
    INFO("stdout: " << launch.out() << "\nstderr: " << err);
    CHECK(launch.rc() == 1);
    CHECK(lines_with(err,
                     "fanout launch: rank 1 was killed by signal 9 (Killed); restarting "
                     "every rank (restart 1 of 1)")
              .size() == 1);
    CHECK(lines_with(err,
                     "fanout launch: rank 1 was killed by signal 9 (Killed); stopping the "
                     "other ranks (no restart left: --max-restarts 1)")
              .size() == 1);
    CHECK(lines_with(err, "fanout launch: ").size() == 2);
    CHECK_FALSE(fs::exists(out + "/final"));
    check_no_process_left(marker);
  }
}

TEST_CASE("launch never restarts after Ctrl-C or SIGTERM, even with restarts left") {
  // --grace 0: the ranks are killed at once, a failure, but one the user asked for.
  TinyRun run;
  for (int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    const std::string out = run.dir / ("out" + std::to_string(sig)), marker = marker_env();
    FanoutProcess launch(
        concat({"launch", "--nproc-per-node", "2", "--max-restarts", "3", "--grace", "0", "--"},
               with_value(restart_train(run, out), "--steps", "100000")),
        {marker}, run.dir.path, "launch");
    REQUIRE(wait_for_path(out + "/step-000002", launch, 120));
    launch.kill(sig);
    REQUIRE(launch.wait(60));
    std::string err = launch.err();
    INFO("stdout: " << launch.out() << "\nstderr: " << err);
    CHECK(launch.rc() != 0);
    CHECK(lines_with(err, "was killed by signal 9 (Killed); stopping the other ranks").size() == 1);
    CHECK(lines_with(err, "restart").empty());
    CHECK(lines_with(launch.out(), "resuming from").empty());
    check_no_process_left(marker);
  }
}

TEST_CASE("launch never restarts a usage error, and says so in one line") {
  // Every restart would refuse the same command line: exit code 2.
  TinyRun run;
  const std::string out = run.dir / "out", marker = marker_env();
  FanoutProcess launch(concat({"launch", "--nproc-per-node", "2", "--max-restarts", "3", "--"},
                              concat(restart_train(run, out), {"--lr", "abc"})),
                       {marker}, run.dir.path, "launch");
  REQUIRE(launch.wait(60));
  std::string err = launch.err();
  INFO("stderr: " << err);
  CHECK(launch.rc() == 2);
  const std::vector<std::string> said = lines_with(err, "fanout launch: ");
  REQUIRE(said.size() == 1);
  CHECK(has(said[0],
            "exited with code 2; stopping the other ranks (not restarting: exit code 2 is "
            "a usage error, which every restart would repeat)"));
  CHECK(lines_with(err, "--lr: 'abc' is not a number").size() <= 2);  // one attempt's ranks
  CHECK_FALSE(fs::exists(out));
  check_no_process_left(marker);
}

// --- refusals -----------------------------------------------------------------------

TEST_CASE("launch refuses restarts it cannot honour before starting any rank") {
  TempDir dir("fanout-restart-flags");
  const std::string out = dir / "out";
  const std::vector<std::string> train = {"train",   "--strategy", "ddp",   "--devices", "cpu",
                                          "--steps", "1",          "--out", out};
  // A restart without --resume auto would start over (or refuse the non-empty --out).
  for (const std::vector<std::string>& resume : std::vector<std::vector<std::string>>{
           {}, {"--resume", "last"}, {"--resume", out + "/final"}}) {
    CliResult r = run_fanout(concat(
        {"launch", "--nproc-per-node", "2", "--max-restarts", "2", "--"}, concat(train, resume)));
    check_fails(r.rc, r.err,
                "--max-restarts restarts every rank with the same command: add --resume auto (and "
                "--save-every N) to the train command");
    CHECK(r.out.empty());
  }
  // Several nodes would have to restart together.
  CliResult r = run_fanout(concat({"launch", "--nproc-per-node", "2", "--nnodes", "2",
                                   "--master-port", "29500", "--max_restarts", "1", "--"},
                                  concat(train, {"--resume", "auto"})));
  check_fails(r.rc, r.err, "--max-restarts restarts the ranks of one node: with --nnodes 2");
  r = run_fanout({"launch", "--max-restarts", "-1", "--", "devices"});
  check_fails(r.rc, r.err, "--max-restarts: '-1' is out of range");
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("a multi-node launch needs FANOUT_JOB_SECRET from the environment") {
  TempDir dir("fanout-restart-secret");
  FanoutProcess launch(
      {"launch", "--nnodes", "2", "--node-rank", "0", "--master-port", "29500", "--", "devices"},
      {"FANOUT_JOB_SECRET"}, dir.path, "launch");
  REQUIRE(launch.wait(30));
  check_fails(launch.rc(), launch.err(),
              "a multi-node launch needs the same FANOUT_JOB_SECRET on every node, e.g. export "
              "FANOUT_JOB_SECRET=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n')");
  CHECK(launch.out().empty());
}

// --- train --resume auto ------------------------------------------------------------

TEST_CASE("train --resume auto starts fresh, resumes a run directory, refuses other directories") {
  TinyRun run;
  auto train = [&](const std::string& out, int64_t steps) {
    return run_fanout(concat(with_value(run.train_args(out, steps), "--save-every", "2"),
                             {"--devices", "cpu:0", "--resume", "auto"}));
  };
  const std::string ref = run.dir / "ref";
  CliResult r = run_fanout(concat(run.train_args(ref, 5), {"--devices", "cpu:0"}));
  REQUIRE(r.rc == 0);

  // No --out yet, then an empty one: a fresh start.
  const std::string fresh = run.dir / "fresh", empty = run.dir / "empty";
  fs::create_directory(empty);
  for (const std::string& out : {fresh, empty}) {
    CAPTURE(out);
    r = train(out, 3);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(lines_with(r.out, "no checkpoint in " + out + ": starting fresh").size() == 1);
    CHECK(metrics_losses(out + "/metrics.jsonl").size() == 3);
  }
  // A run directory: continued from its newest checkpoint (final, step 3) to step 5,
  // as a run that went to 5 in one go. --init, given again, is the fresh start's.
  r = train(fresh, 5);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "resuming from " + fresh + "/final (step 3)").size() == 1);
  CHECK(bits_equal(weights_all(fresh + "/final"), weights_all(ref + "/final")));
  CHECK(metrics_losses(fresh + "/metrics.jsonl") == metrics_losses(ref + "/metrics.jsonl"));

  // What a run killed before its first checkpoint leaves (metrics, a half-written
  // checkpoint of a writer that is gone) is a fresh start; the leftover goes.
  const std::string early = run.dir / "early";
  fs::create_directories(early + "/step-000002.tmp-999999999-0");
  file_write(early + "/step-000002.tmp-999999999-0/config.json", "{");
  file_write(early + "/metrics.jsonl", "{\"step\": 1, \"loss\": 5.0}\n");
  r = train(early, 3);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "no checkpoint in " + early + ": starting fresh").size() == 1);
  CHECK_FALSE(fs::exists(early + "/step-000002.tmp-999999999-0"));
  std::vector<double> first3 = metrics_losses(ref + "/metrics.jsonl");
  first3.resize(3);
  CHECK(metrics_losses(early + "/metrics.jsonl") == first3);  // the old line 1 is gone

  // Someone else's directory, a file, no --out: one line each, nothing written.
  const std::string other = run.dir / "other";
  fs::create_directory(other);
  file_write(other + "/notes.txt", "mine");
  r = train(other, 3);
  check_fails(r.rc, r.err,
              "--resume auto: --out " + other +
                  " holds 'notes.txt', which no fanout run writes: it is not a run directory");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(other)) names.push_back(e.path().filename());
  CHECK(names == std::vector<std::string>{"notes.txt"});
  r = train(other + "/notes.txt", 3);
  check_fails(r.rc, r.err, "--resume auto: --out " + other + "/notes.txt is not a directory");
  std::vector<std::string> no_out = run.train_args("x", 3);
  no_out.resize(no_out.size() - 2);  // drop --out x
  r = run_fanout(concat(no_out, {"--devices", "cpu:0", "--resume", "auto"}));
  check_fails(r.rc, r.err, "--resume auto needs --out DIR");
}

TEST_CASE("ddp ranks that find different checkpoints refuse to train") {
  // An --out that is not shared: rank 0 sees the run's checkpoint, rank 1 none.
  TinyRun run;
  const std::string seen = run.dir / "seen", unseen = run.dir / "unseen";
  auto args = [&](const std::string& out) {
    return concat(with_value(run.train_args(out, 4), "--save-every", "2"),
                  {"--strategy", "ddp", "--devices", "cpu", "--resume", "auto", "--timeout", "20"});
  };
  CliResult r = run_fanout(
      concat(with_value(run.train_args(seen, 2), "--save-every", "2"), {"--devices", "cpu:0"}));
  REQUIRE(r.rc == 0);
  int port = free_port();
  FanoutProcess rank0(args(seen), rank_env(0, 2, port), run.dir.path, "rank0");
  FanoutProcess rank1(args(unseen), rank_env(1, 2, port), run.dir.path, "rank1");
  REQUIRE(wait_all({&rank0, &rank1}, 60));
  for (FanoutProcess* p : {&rank0, &rank1}) {
    std::string err = p->err();
    INFO("stderr: " << err);
    CHECK(p->rc() == 1);
    CHECK(
        lines_with(err, "the ranks would start from different steps (rank 0 from step 2").size() ==
        1);
    CHECK(has(err, "every rank must see the same --out"));
  }
  CHECK(has(rank1.err(), "this rank from step 0"));
  CHECK(metrics_last_step(seen + "/metrics.jsonl") == 2);  // nothing trained
  CHECK_FALSE(fs::exists(unseen));
}
