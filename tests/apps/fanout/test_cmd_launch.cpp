// `fanout launch` and `train --strategy ddp` through the real binary, on
// loopback with CPU ranks: N processes train exactly what one process trains on
// one device or on N devices (per-step loss and the weight update), only rank 0
// writes and prints, a ddp checkpoint resumes in a single process, and each
// setup mistake (busy port, no master, missing variables, bad launch flags) is
// a non-zero exit with a line that says what is wrong.
// Failures while running (a killed rank, Ctrl-C): test_cmd_launch_failures.cpp.

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {
namespace fs = std::filesystem;

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// What a run must reproduce: its per-step loss and its weight update.
struct RunResult {
  std::vector<double> losses;
  std::vector<float> update;  // final weights minus the initial ones
};

RunResult run_result(const std::string& out, const std::vector<float>& init) {
  return {metrics_losses(out + "/metrics.jsonl"), minus(weights_all(out + "/final"), init)};
}

void check_same(const RunResult& got, const RunResult& ref) {
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got.losses[i] - ref.losses[i]) <= 1e-5 * std::abs(ref.losses[i]));
  }
  CHECK(relative_l2(got.update, ref.update) < 1e-3);
}

std::vector<std::string> cpu_list(int n) {
  std::string list;
  for (int i = 0; i < n; ++i) list += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  return {"--devices", list};
}

// A socket listening on 127.0.0.1 at a port of the kernel's choosing.
struct BusyPort {
  int fd = -1, port = 0;
  BusyPort() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    port = ntohs(sa.sin_port);
  }
  ~BusyPort() { ::close(fd); }
};
}  // namespace

// --- equivalence ----------------------------------------------------------------

TEST_CASE("launch ddp on 2 and 3 CPU processes trains as one device and as dp do") {
  TinyRun run;
  std::vector<float> init = weights_all(run.init);
  std::string single = run.dir / "single";
  CliResult r = run_fanout(concat(run.train_args(single, 3), {"--devices", "cpu:0", "--json"}));
  INFO("single stderr: " << r.err);
  REQUIRE(r.rc == 0);
  RunResult ref = run_result(single, init);
  REQUIRE(ref.losses.size() == 3);
  CHECK(relative_l2(ref.update, std::vector<float>(init.size(), 0.0f)) > 0);  // it did train

  for (int n : {2, 3}) {
    CAPTURE(n);
    std::string dp = run.dir / ("dp" + std::to_string(n));
    r = run_fanout(concat(run.train_args(dp, 3), concat(cpu_list(n), {"--json"})));
    INFO("dp stderr: " << r.err);
    REQUIRE(r.rc == 0);
    check_same(run_result(dp, init), ref);

    std::string ddp = run.dir / ("ddp" + std::to_string(n));
    r = run_fanout(concat({"launch", "--nproc-per-node", std::to_string(n), "--"},
                          concat(run.train_args(ddp, 3), kDdp)));
    INFO("launch stdout: " << r.out << "\nlaunch stderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.empty());
    check_same(run_result(ddp, init), ref);
    // The ranks share the launcher's stdout: one header and one ending, from rank 0.
    CHECK(lines_with(r.out, "fanout train: ").size() == 1);
    CHECK(lines_with(r.out, std::to_string(n) + " processes (gloo").size() == 1);
    CHECK(lines_with(r.out, "final checkpoint: ").size() == 1);
  }

  // A ddp checkpoint is an ordinary one: a single process continues it to step 5
  // exactly as a single process that ran 5 steps from the start.
  std::string single5 = run.dir / "single5";
  r = run_fanout(concat(run.train_args(single5, 5), {"--devices", "cpu:0", "--json"}));
  REQUIRE(r.rc == 0);
  std::string ddp2 = run.dir / "ddp2";
  r = run_fanout({"train", "--resume", ddp2 + "/final", "--steps", "5", "--strategy", "dp",
                  "--devices", "cpu:0", "--json"});
  INFO("resume stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(last_json_line(r.out).value("steps", 0) == 5);
  check_same(run_result(ddp2, init), run_result(single5, init));
}

TEST_CASE("launch ddp in bf16 trains as one bf16 device, with fp32 or bf16 gradient sums") {
  TinyRun run;
  std::vector<float> init = weights_all(run.init);
  const std::vector<std::string> bf16 = {"--precision", "bf16"};
  std::string single = run.dir / "single";
  CliResult r = run_fanout(concat(run.train_args(single, 3), concat(bf16, {"--devices", "cpu:0"})));
  INFO("single stderr: " << r.err);
  REQUIRE(r.rc == 0);
  RunResult ref = run_result(single, init);
  std::string ddp = run.dir / "ddp";
  r = run_fanout(concat({"launch", "--nproc-per-node", "2", "--"},
                        concat(run.train_args(ddp, 3), concat(kDdp, bf16))));
  INFO("launch stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "bf16 mixed precision").size() == 1);
  // bf16 at its tolerance: each row is computed as on one device, but the f32
  // sums over rows run in another order and a last-bit change before a bf16 store
  // moves that value by up to 2^-8.
  RunResult got = run_result(ddp, init);
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    CHECK(std::abs(got.losses[i] - ref.losses[i]) <= 1e-4 * std::abs(ref.losses[i]));
  CHECK(relative_l2(got.update, ref.update) < 1e-2);
  // Gradients summed by a ring all-reduce on bf16 elements (each partial sum in
  // fp32): the same training within bf16's rounding of the gradients.
  std::string ddp16 = run.dir / "ddp16";
  r = run_fanout(concat(
      {"launch", "--nproc-per-node", "3", "--"},
      concat(run.train_args(ddp16, 3), concat(kDdp, concat(bf16, {"--grad-comm", "bf16"})))));
  INFO("launch stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "bf16 gradient sums").size() == 1);
  RunResult comm = run_result(ddp16, init);
  REQUIRE(comm.losses.size() == ref.losses.size());
  CHECK(comm.losses[0] == doctest::Approx(ref.losses[0]).epsilon(1e-4));  // before any update
  for (size_t i = 1; i < ref.losses.size(); ++i)
    CHECK(std::abs(comm.losses[i] - ref.losses[i]) <= 2e-3 * std::abs(ref.losses[i]));
  CHECK(relative_l2(comm.update, ref.update) < 0.1);
  CHECK(relative_l2(comm.update, got.update) > 0);  // the rounding did happen
}

TEST_CASE("ddp ranks other than 0 write no files and print nothing") {
  // Started by hand with a different --out each: rank 1's must stay absent.
  TinyRun run;
  std::string out0 = run.dir / "rank0", out1 = run.dir / "rank1";
  int port = free_port();
  FanoutProcess rank0(concat(run.train_args(out0, 3), kDdp), rank_env(0, 2, port), run.dir.path,
                      "rank0");
  FanoutProcess rank1(concat(run.train_args(out1, 3), kDdp), rank_env(1, 2, port), run.dir.path,
                      "rank1");
  REQUIRE(wait_all({&rank0, &rank1}, 60));
  INFO("rank 0 stderr: " << rank0.err() << "\nrank 1 stderr: " << rank1.err());
  CHECK(rank0.rc() == 0);
  CHECK(rank1.rc() == 0);
  CHECK(lines_with(rank0.out(), "fanout train: ").size() == 1);
  CHECK(lines_with(rank0.out(), "step 3/3").size() == 1);
  CHECK(rank1.out().empty());
  CHECK(rank1.err().empty());
  CHECK_FALSE(fs::exists(out1));
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(out0)) files.insert(e.path().filename().string());
  CHECK(files == std::set<std::string>{"curves.svg", "final", "metrics.jsonl"});
  CHECK(metrics_losses(out0 + "/metrics.jsonl").size() == 3);
}

// --- setup errors -----------------------------------------------------------------

TEST_CASE("ddp rank 0 on a port already in use fails with one line") {
  TinyRun run;
  BusyPort busy;
  FanoutProcess rank0(concat(run.train_args(run.dir / "out", 3), kDdp), rank_env(0, 2, busy.port),
                      run.dir.path, "rank0");
  REQUIRE(rank0.wait(30));
  check_fails(rank0.rc(), rank0.err(), "the port is already in use");
  std::string where = std::string("127.0.0.1:").append(std::to_string(busy.port));
  CHECK(rank0.err().find(where) != std::string::npos);
}

TEST_CASE("launch on a port already in use fails and names the failed rank") {
  TinyRun run;
  BusyPort busy;
  // Rank 1 reaches the busy socket, which never answers its hello: --timeout
  // ends it (with "no answer from the master").
  FanoutProcess launch(
      concat({"launch", "--nproc-per-node", "2", "--master-port", std::to_string(busy.port),
              "--grace", "5", "--"},
             concat(run.train_args(run.dir / "out", 3), concat(kDdp, {"--timeout", "1"}))),
      {}, run.dir.path, "launch");
  REQUIRE(launch.wait(30));
  std::string err = launch.err();
  INFO("stderr: " << err);
  CHECK(launch.rc() != 0);
  CHECK(lines_with(err, "the port is already in use").size() == 1);
  CHECK(lines_with(err, "fanout launch: rank 0 exited with code 1").size() == 1);
}

TEST_CASE("ddp rank without a reachable master fails within the timeout") {
  TinyRun run;
  FanoutProcess rank1(concat(run.train_args(run.dir / "out", 3), concat(kDdp, {"--timeout", "2"})),
                      rank_env(1, 2, free_port()), run.dir.path, "rank1");
  REQUIRE(rank1.wait(30));
  check_fails(rank1.rc(), rank1.err(), "cannot reach the master");
  CHECK(rank1.seconds() < 10);
  CHECK_FALSE(fs::exists(run.dir / "out"));
}

TEST_CASE("ddp without the launcher environment names the missing variable") {
  TinyRun run;
  std::vector<std::string> args = concat(run.train_args(run.dir / "out", 3), kDdp);
  std::vector<std::string> all = rank_env(0, 1, free_port());
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    CAPTURE(name);
    std::vector<std::string> env = all;
    env.push_back(name);  // unset this one
    FanoutProcess p(args, env, run.dir.path, name);
    REQUIRE(p.wait(30));
    check_fails(p.rc(), p.err(), name);
  }
  FanoutProcess bad(args, concat(all, {"RANK=one"}), run.dir.path, "bad");
  REQUIRE(bad.wait(30));
  check_fails(bad.rc(), bad.err(), "RANK: 'one'");
  CHECK_FALSE(fs::exists(run.dir / "out"));
}

TEST_CASE("launch without a command or with no processes fails") {
  CliResult r = run_fanout({"launch", "--nproc-per-node", "2", "--"});
  check_fails(r.rc, r.err, "give the command to run after --");
  r = run_fanout({"launch", "--nproc-per-node", "2"});
  check_fails(r.rc, r.err, "give the command to run after --");
  r = run_fanout({"launch", "--nproc-per-node", "0", "--", "devices"});
  check_fails(r.rc, r.err, "--nproc-per-node: '0' is out of range (expected 1..1024)");
  r = run_fanout({"launch", "--nproc-per-node", "2", "--nnodes", "2", "--", "devices"});
  check_fails(r.rc, r.err, "needs --master-port");
}

TEST_CASE("launch refuses a train that is not multi-process before starting anything") {
  // Each rank would otherwise train alone, every one of them on the same --out.
  TempDir dir("fanout-launch");
  const std::string out = dir / "out";
  const std::string prefix = "launch runs multi-process training: ";
  struct Case {
    std::vector<std::string> strategy;
    std::string phrase;
  };
  for (const Case& c : std::vector<Case>{
           {{"--strategy", "dp"},
            "'train --strategy dp' would start 2 independent runs on one --out; "
            "use --strategy ddp, zero1, zero2 or zero3"},
           {{"--strategy=zero4"}, "'train --strategy zero4' would start 2 independent runs"},
           {{}, "'train' without --strategy would start 2 independent runs"},
           {{"--strategy", "ddp", "--strategy", "zero1"},
            "--strategy is given 2 times ('ddp', 'zero1')"},
           {{"--strategy=ddp", "--strategy", "ddp"}, "--strategy is given 2 times"},
           {{"--strategy"}, "'train --strategy' has no value"}}) {
    std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--", "train"};
    args = concat(concat(args, c.strategy), {"--devices", "cpu:0,cpu:1", "--steps", "1",
                                             "--batch-size", "2", "--seq-len", "16", "--out", out});
    CliResult r = run_fanout(args);
    CAPTURE(c.phrase);
    check_fails(r.rc, r.err, prefix + c.phrase);
    CHECK(r.err.rfind("fanout: error: ", 0) == 0);
    CHECK(r.out.empty());  // no rank printed its header
    CHECK_FALSE(fs::exists(out));
  }
}

TEST_CASE("launch accepts --strategy=ddp as well as --strategy ddp") {
  TinyRun run;
  std::vector<std::string> args = run.train_args(run.dir / "out", 1);
  CliResult r = run_fanout(concat({"launch", "--nproc-per-node", "2", "--"},
                                  concat(args, {"--strategy=ddp", "--devices", "cpu"})));
  INFO("stderr: " << r.err);
  CHECK(r.rc == 0);
  CHECK(lines_with(r.out, "2 processes (gloo").size() == 1);
}

TEST_CASE("launch refuses a malformed or out-of-range number before starting any rank") {
  TempDir dir("fanout-launch-flags");
  const std::string out = dir / "out";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", ""}, "--nproc-per-node: an empty value is not a number"},
      {{"--nproc-per-node", "0"}, "--nproc-per-node: '0' is out of range"},
      {{"--nproc-per-node", "100000"}, "--nproc-per-node: '100000' is out of range"},
      {{"--nnodes", "-2"}, "--nnodes: '-2' is out of range"},
      {{"--master-port", "70000"}, "--master-port: '70000' is out of range"},
      {{"--master-port", "12ab"}, "--master-port: '12ab' is not a whole number"},
      {{"--grace", "inf"}, "--grace: 'inf' is not a finite number"},
      {{"--master-addr", ""}, "--master-addr: an empty value is not an address"},
  };
  for (const auto& [flags, phrase] : cases) {
    std::vector<std::string> args = {"launch"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "train", "--strategy", "ddp", "--devices", "cpu", "--steps", "1",
                             "--out", out});
    CAPTURE(phrase);
    CliResult r = run_fanout(args);
    INFO("rc " << r.rc << " stderr: " << r.err);
    CHECK(r.rc != 0);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, phrase));
    CHECK(!fs::exists(out));
  }
}

TEST_CASE("launch takes torchrun's spellings and --standalone, ddp overlaps unless --no-overlap") {
  TinyRun run;
  // As torchrun: underscores, --standalone; ddp overlaps its all-reduce by default.
  CliResult r = run_fanout(concat({"launch", "--nproc_per_node", "2", "--standalone", "--"},
                                  concat(run.train_args(run.dir / "a", 1), kDdp)));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "| ddp, loss on replicas, overlap |").size() == 1);
  r = run_fanout(concat({"launch", "--nproc-per-node", "2", "--master_addr", "127.0.0.1", "--"},
                        concat(run.train_args(run.dir / "b", 1), concat(kDdp, {"--no-overlap"}))));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "| ddp, loss on replicas |").size() == 1);
  // --standalone is one node on a free port: it refuses what contradicts that.
  r = run_fanout({"launch", "--standalone", "--nnodes", "2", "--", "devices"});
  check_fails(r.rc, r.err, "--standalone runs one node; it does not combine with --nnodes 2");
  r = run_fanout({"launch", "--standalone", "--master_port", "29500", "--", "devices"});
  check_fails(r.rc, r.err, "--standalone picks a free port itself; drop --master-port");
  r = run_fanout({"launch", "--nproc_per_node", "0", "--", "devices"});
  check_fails(r.rc, r.err, "--nproc-per-node: '0' is out of range (expected 1..1024)");
}
