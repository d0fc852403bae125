// `train --strategy ddp` started by launchers other than fanout launch: ranks
// given Slurm's, Open MPI's and PMI's variables (set by the test, RANK and the
// rest unset) and the real torchrun in its default static rendezvous and with
// c10d. Each run prints which launcher it recognised, in one line from rank 0,
// and ends with the weights a `fanout launch` run of the same world ends with.

#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/command_util.h"
#include "tests/apps/fanout/launch_util.h"
#include "tests/paths_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {
namespace fs = std::filesystem;

constexpr int kSteps = 2;
// ddp over CPU devices, its start-up bounded well inside the tests' waits.
const std::vector<std::string> kDdpTimed = concat(kDdp, {"--timeout", "20"});

// Every variable a launcher sets, unset, so only the test's own reach the ranks;
// one thread per rank so every run computes alike.
std::vector<std::string> clean_env() {
  std::vector<std::string> env = {"OMP_NUM_THREADS=1"};
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "FANOUT_LAUNCHER", "FANOUT_JOB_SECRET", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK",
        "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_NODELIST",
        "SLURM_STEP_TASKS_PER_NODE", "SLURM_NNODES", "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES"})
    env.push_back(name);
  return env;
}

// A free port within 10000..59999 and a job id that derives it (10000 + id % 50000).
std::pair<int, std::string> port_and_job_id() {
  for (int tries = 0; tries < 100; ++tries) {
    int port = free_port();
    if (port >= 10000 && port <= 59999) return {port, std::to_string(port - 10000 + 50000)};
  }
  FAIL("no free port within 10000..59999");
  return {};
}

// The weights and losses a run left in `out`.
struct Result {
  std::vector<double> losses;
  std::vector<float> weights;
};
Result result_of(const std::string& out) {
  return {metrics_losses(out + "/metrics.jsonl"), weights_all(out + "/final")};
}
void check_equal(const Result& got, const Result& ref) {
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    CHECK(std::abs(got.losses[i] - ref.losses[i]) <= 1e-6 * std::abs(ref.losses[i]));
  CHECK(relative_l2(got.weights, ref.weights) < 1e-6);
}

// `fanout launch --nproc-per-node n` of the tiny run: what every launcher must reproduce.
Result reference(const TinyRun& run, int n) {
  std::string out = run.dir / ("launch" + std::to_string(n));
  FanoutProcess p(concat({"launch", "--nproc-per-node", std::to_string(n), "--"},
                         concat(run.train_args(out, kSteps), kDdpTimed)),
                  clean_env(), run.dir.path, "launch" + std::to_string(n));
  REQUIRE(p.wait(60));
  INFO("launch stderr: " << p.err());
  REQUIRE(p.rc() == 0);
  Result r = result_of(out);
  REQUIRE(r.losses.size() == kSteps);
  return r;
}

// Starts `world` ranks with env_of(rank) on top of clean_env(); checks they all
// succeed, that rank 0 alone printed `line`, and that the run equals `ref`.
template <typename EnvOf>
void run_ranks(const TinyRun& run, const std::string& name, int world, EnvOf env_of,
               const std::string& line, const Result& ref) {
  std::string out = run.dir / name;
  std::vector<std::unique_ptr<FanoutProcess>> ranks;
  std::vector<FanoutProcess*> all;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<FanoutProcess>(concat(run.train_args(out, kSteps), kDdpTimed),
                                                    concat(clean_env(), env_of(r)), run.dir.path,
                                                    name + std::to_string(r)));
    all.push_back(ranks.back().get());
  }
  REQUIRE(wait_all(all, 60));
  for (int r = 0; r < world; ++r) {
    INFO(name << " rank " << r << " stderr: " << ranks[r]->err());
    CHECK(ranks[r]->rc() == 0);
  }
  CHECK(lines_with(ranks[0]->out(), "fanout: launcher: ") == std::vector<std::string>{line});
  CHECK(lines_with(ranks[1]->out(), "fanout: launcher: ").empty());
  MESSAGE(line);
  check_equal(result_of(out), ref);
}

// Why torchrun cannot run here, or "".
std::string torchrun_missing() {
  if (::access("/usr/bin/torchrun", X_OK) != 0) return "/usr/bin/torchrun is not installed";
  if (shell("/usr/bin/python3 -c 'import torch'") != 0)
    return "/usr/bin/python3 cannot import torch";
  return "";
}
}  // namespace

TEST_CASE("ranks started with slurm's variables train as fanout launch does") {
  TinyRun run;
  Result ref = reference(run, 2);
  auto [port, job] = port_and_job_id();
  // Two tasks on the first of two listed hosts; the master is the first host.
  auto env_of = [&, job = job](int r) -> std::vector<std::string> {
    return {"SLURM_PROCID=" + std::to_string(r),
            "SLURM_NTASKS=2",
            "SLURM_LOCALID=" + std::to_string(r),
            "SLURM_NODEID=0",
            "SLURM_TASKS_PER_NODE=2",
            "SLURM_JOB_NODELIST=127.0.0.[1-2]",
            "SLURM_JOB_ID=" + job,
            "SLURM_STEP_ID=0"};
  };
  run_ranks(run, "slurm", 2, env_of,
            "fanout: launcher: slurm (job " + job +
                ".0, 2 ranks on 1 node, master 127.0.0.1:" + std::to_string(port) + ")",
            ref);
}

TEST_CASE("ranks started with Open MPI's or PMI's variables train as fanout launch does") {
  TinyRun run;
  Result ref = reference(run, 2);
  auto [port, job] = port_and_job_id();
  auto ompi = [&, job = job](int r) -> std::vector<std::string> {
    return {"OMPI_COMM_WORLD_RANK=" + std::to_string(r), "OMPI_COMM_WORLD_SIZE=2",
            "OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(r), "OMPI_COMM_WORLD_LOCAL_SIZE=2",
            "OMPI_MCA_ess_base_jobid=" + job};
  };
  run_ranks(run, "ompi", 2, ompi,
            "fanout: launcher: open mpi (job " + job +
                ", 2 ranks on 1 node, master 127.0.0.1:" + std::to_string(port) + ")",
            ref);
  int pmi_port = free_port();
  auto pmi = [&](int r) -> std::vector<std::string> {
    return {"PMI_RANK=" + std::to_string(r), "PMI_SIZE=2", "MPI_LOCALRANKID=" + std::to_string(r),
            "MPI_LOCALNRANKS=2", "MASTER_PORT=" + std::to_string(pmi_port)};
  };
  run_ranks(run, "pmi", 2, pmi,
            "fanout: launcher: pmi (2 ranks on 1 node, master 127.0.0.1:" +
                std::to_string(pmi_port) + ")",
            ref);
}

TEST_CASE("torchrun's default static rendezvous and c10d both train as fanout launch does") {
  std::string missing = torchrun_missing();
  if (!missing.empty()) {
    MESSAGE("skipped: " << missing);
    return;
  }
  TinyRun run;
  Result ref = reference(run, 2);
  struct Case {
    std::string name;
    std::vector<std::string> rdzv;
    std::string line;  // what rank 0 prints, after the port
  };
  std::string p = std::to_string(free_port()), p2 = std::to_string(free_port());
  for (const Case& c : std::vector<Case>{
           {"static",
            {"--master_port", p},
            "fanout: launcher: torchrun (run none, restart 0, 2 ranks on 1 node, static "
            "rendezvous through torchrun's store at 127.0.0.1:" +
                p + ")"},
           {"c10d", {"--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:" + p2}, ""}}) {
    CAPTURE(c.name);
    std::string out = run.dir / c.name;
    // "-r 2 -t 2": torch 1.13 under Python 3.11 parses the default "0" of
    // --redirects and --tee to None and fails; 2 redirects (and tees) stderr
    // only, so the ranks' stdout reaches the log untouched.
    std::vector<std::string> args = {"/usr/bin/torchrun", "--nnodes", "1", "--nproc_per_node", "2"};
    args = concat(concat(args, c.rdzv),
                  {"-r", "2", "-t", "2", "--log_dir", run.dir / (c.name + "-logs"), "--no_python",
                   test::fanout_binary()});
    Command torchrun(concat(args, concat(run.train_args(out, kSteps), kDdpTimed)), clean_env(),
                     run.dir / (c.name + ".log"));
    int rc = torchrun.wait(90);
    std::string log = torchrun.output();
    INFO("torchrun output: " << log);
    REQUIRE(rc == 0);
    std::vector<std::string> lines = lines_with(log, "fanout: launcher: ");
    REQUIRE(lines.size() == 1);
    MESSAGE(lines[0]);
    if (!c.line.empty()) {
      CHECK(lines[0] == c.line);
    } else {  // c10d: torchrun picks MASTER_ADDR (localhost) and a free MASTER_PORT itself
      CHECK(lines[0].rfind("fanout: launcher: torchrun (run ", 0) == 0);
      CHECK(lines[0].find(", restart 0, 2 ranks on 1 node, master ") != std::string::npos);
    }
    check_equal(result_of(out), ref);
  }
}
