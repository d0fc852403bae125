// ddp start-up as a careless or hostile environment meets it, through the real
// binary: --timeout bounds a start-up whose ranks never come (Note [Bounded ddp
// start-up]); a world past what the rendezvous or a Gloo mesh holds, a launch
// inside another and an environment number that fanout's number rules refuse
// (" 0", "0x2") each end at once with one line naming what is wrong.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {
namespace fs = std::filesystem;

}  // namespace

TEST_CASE("ddp start-up whose ranks never come ends within --timeout naming them in one line") {
  // Rank 0 of 1024 alone: it used to build a Gloo pair for each absent rank and
  // tear them down for 10 s after the timeout, then list 1023 ranks one by one.
  TinyRun run;
  FanoutProcess rank0(concat(run.train_args(run.dir / "out", 2), concat(kDdp, {"--timeout", "3"})),
                      rank_env(0, 1024, free_port()), run.dir.path, "rank0");
  REQUIRE(rank0.wait(60));
  check_fails(rank0.rc(), rank0.err(),
              {"rank 0: ranks 1-1023 of 1024 never connected to the master", "within 3 s"});
  CHECK(rank0.seconds() < 3 + 4);
}

TEST_CASE("a world past what fanout runs is refused before anything connects") {
  TinyRun run;
  const std::vector<std::string> args = run.train_args(run.dir / "out", 2);
  struct Case {
    std::vector<std::string> env, args, phrases;
  };
  for (const Case& c : std::vector<Case>{
           // Past the rendezvous, on any device.
           {rank_env(0, 100000, free_port()),
            concat(args, {"--strategy", "ddp", "--devices", "cuda", "--timeout", "5"}),
            {"WORLD_SIZE=100000 is more ranks than one fanout job holds (at most 16384"}},
           // Past a Gloo mesh (--devices cpu).
           {rank_env(0, 2000, free_port()),
            concat(args, concat(kDdp, {"--timeout", "5"})),
            {"WORLD_SIZE=2000 is more ranks than --devices cpu joins (at most 1024"}},
       }) {
    CAPTURE(c.phrases[0]);
    FanoutProcess p(c.args, c.env, run.dir.path, "rank0");
    CHECK(p.wait(20));
    check_fails(p.rc(), p.err(), c.phrases);
    CHECK(p.out().empty());  // not even the launcher line
    CHECK(p.seconds() < 10);
  }
  // fanout launch itself; a launch past the limit without FANOUT_JOB_SECRET names the limit first.
  FanoutProcess launch({"launch", "--nproc-per-node", "1024", "--nnodes", "64", "--master-port",
                        "29500", "--", "devices"},
                       {"FANOUT_JOB_SECRET"}, run.dir.path, "launch");
  REQUIRE(launch.wait(20));
  check_fails(launch.rc(), launch.err(),
              {"--nproc-per-node 1024 x --nnodes 64 = 65536 ranks is more than one fanout job "
               "holds (at most 16384"});
  CHECK_FALSE(fs::exists(run.dir / "out"));
}

TEST_CASE("environment numbers go by fanout's number rules and a bad one is named in one line") {
  TinyRun run;
  const std::vector<std::string> ddp =
      concat(run.train_args(run.dir / "out", 1), concat(kDdp, {"--timeout", "2"}));
  const std::vector<std::string> env = rank_env(0, 2, free_port());
  struct Case {
    std::string entry, phrase;
  };
  for (const Case& c : std::vector<Case>{
           {"RANK= 0", "environment variable RANK: ' 0' is not a whole number"},
           {"RANK=+0", "environment variable RANK: '+0' is not a whole number"},
           {"WORLD_SIZE=0x2", "environment variable WORLD_SIZE: '0x2' is not a whole number"},
           {"LOCAL_RANK=0.0", "environment variable LOCAL_RANK: '0.0' is not a whole number"},
           {"MASTER_PORT=29500 ", "environment variable MASTER_PORT: '29500 ' is not a whole"},
       }) {
    CAPTURE(c.entry);
    FanoutProcess p(ddp, concat(env, {c.entry}), run.dir.path, "rank0");
    REQUIRE(p.wait(30));
    check_fails(p.rc(), p.err(), {c.phrase});
  }
  CHECK_FALSE(fs::exists(run.dir / "out"));
  // FANOUT_CPU_THREADS, in a one-process run: "2abc" was read as 2, "0" as 1.
  for (const std::string threads : {"2abc", "0", " 2"}) {
    CAPTURE(threads);
    FanoutProcess p(run.train_args(run.dir / "threads", 1), {"FANOUT_CPU_THREADS=" + threads},
                    run.dir.path, "threads");
    REQUIRE(p.wait(60));
    check_fails(p.rc(), p.err(), {"environment variable FANOUT_CPU_THREADS: '" + threads + "'"});
    // Refused before --out is made: no empty run folder is left behind.
    CHECK_FALSE(fs::exists(run.dir / "threads"));
  }
  // WORLD_SIZE beside a one-process strategy: "01" is one process, and "x" is no
  // number (both were taken as "several processes" by their text).
  {
    FanoutProcess p(run.train_args(run.dir / "world1", 1), {"WORLD_SIZE=01"}, run.dir.path,
                    "world1");
    REQUIRE(p.wait(60));
    CHECK(p.rc() == 0);
    FanoutProcess bad(run.train_args(run.dir / "worldx", 1), {"WORLD_SIZE=x"}, run.dir.path,
                      "worldx");
    REQUIRE(bad.wait(60));
    check_fails(bad.rc(), bad.err(),
                {"environment variable WORLD_SIZE: 'x' is not a whole number"});
    CHECK_FALSE(fs::exists(run.dir / "worldx"));
  }
  // The test hook's variables by the same rules ("x" was read as rank 0, "2y" as 2).
  for (const auto& [entries, phrase] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"FANOUT_TEST_KILL_RANK=x", "FANOUT_TEST_KILL_STEP=1"},
            "environment variable FANOUT_TEST_KILL_RANK: 'x' is not a whole number"},
           {{"FANOUT_TEST_KILL_RANK=0", "FANOUT_TEST_KILL_STEP=2y"},
            "environment variable FANOUT_TEST_KILL_STEP: '2y' is not a whole number"},
           {{"FANOUT_TEST_KILL_RANK=0"},
            "FANOUT_TEST_KILL_RANK is set without FANOUT_TEST_KILL_STEP"}}) {
    CAPTURE(entries.front());
    FanoutProcess p(run.train_args(run.dir / "hook", 1), entries, run.dir.path, "hook");
    REQUIRE(p.wait(60));
    check_fails(p.rc(), p.err(), {phrase});
    CHECK_FALSE(fs::exists(run.dir / "hook"));
  }
}

TEST_CASE("a ddp rank checks its open-file limit before it connects, raising the soft one") {
  // Rank 0 of 100 on CPU devices holds a Gloo socket per peer and a rendezvous
  // socket per rank: with 64 files at most it failed halfway through the mesh
  // ("socket: Too many open files") once the ranks came.
  TinyRun run;
  std::string env;
  for (const std::string& e : rank_env(0, 100, free_port())) env += e + " ";
  auto rank0 = [&](const std::string& limits) {
    return run_fanout(concat(run.train_args(run.dir / "out", 1), concat(kDdp, {"--timeout", "2"})),
                      env + "prlimit --nofile=" + limits);
  };
  CliResult r = rank0("64:64");
  check_fails(r.rc, r.err,
              {"rank 0 of 100 ranks needs about 264 open files, and this process may open at "
               "most 64",
               "ulimit -n 264"});
  CHECK_FALSE(fs::exists(run.dir / "out"));
  // A soft limit below the need and a hard one above: raised, and the start-up goes
  // on (to wait for ranks that never come, here).
  r = rank0("64:4096");
  check_fails(r.rc, r.err, {"rank 0: ranks 1-99 of 100 never connected to the master"});
}

TEST_CASE("a launch inside another launch is refused in one line") {
  // A rank's environment carries its launcher's marker.
  CliResult r = run_fanout({"launch", "--", "devices"}, "FANOUT_LAUNCHER=fanout-launch");
  check_fails(r.rc, r.err,
              {"fanout launch cannot run inside another launch (FANOUT_LAUNCHER=fanout-launch"});
  CHECK(r.out.empty());
  // launch -- launch: refused before starting any rank.
  r = run_fanout({"launch", "--nproc-per-node", "2", "--", "launch", "--", "devices"});
  check_fails(r.rc, r.err, {"launch -- launch would start a launcher as each rank"});
  CHECK(r.out.empty());
}
