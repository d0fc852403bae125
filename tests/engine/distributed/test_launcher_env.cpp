// Launcher recognition (engine/distributed/launcher_env.h) from environments given as
// maps: each launcher's variables, the precedence between them, Slurm's
// hostlists and tasks-per-node forms, the derived port, secret and job, the
// line rank 0 prints, and every malformed or inconsistent value as one error
// that names the variable.

#include <doctest/doctest.h>

#include <map>

#include "engine/core/check.h"
#include "engine/distributed/launcher_env.h"

using namespace fanout;
using namespace fanout::distributed;

namespace {
using Env = std::map<std::string, std::string>;

LauncherEnv read(const Env& env) {
  return launcher_env_read([&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// The message of the fanout::Error that reading `env` throws ("" if none).
std::string error_of(const Env& env) {
  try {
    read(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Env with(Env env, const Env& more) {
  for (const auto& [k, v] : more) env[k] = v;
  return env;
}

const Env kTorch = {{"RANK", "3"},
                    {"WORLD_SIZE", "4"},
                    {"LOCAL_RANK", "1"},
                    {"LOCAL_WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "10.0.0.1"},
                    {"MASTER_PORT", "29500"}};
const Env kSlurm = {{"SLURM_PROCID", "5"},
                    {"SLURM_NTASKS", "7"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_NODEID", "2"},
                    {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                    {"SLURM_JOB_NODELIST", "node[01-03],gpu7"},
                    {"SLURM_JOB_ID", "1234"},
                    {"SLURM_STEP_ID", "0"}};
const Env kOmpi = {{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"OMPI_MCA_ess_base_jobid", "3432382465"}};
const Env kPmi = {{"PMI_RANK", "2"},        {"PMI_SIZE", "4"},       {"MPI_LOCALRANKID", "0"},
                  {"MPI_LOCALNRANKS", "2"}, {"MASTER_ADDR", "head"}, {"MASTER_PORT", "23456"}};
}  // namespace

// --- Slurm's formats ----------------------------------------------------------

TEST_CASE("slurm hostlists expand ranges and lists, keeping zero padding") {
  using V = std::vector<std::string>;
  CHECK(slurm_hostlist_expand("node1", "L") == V{"node1"});
  CHECK(slurm_hostlist_expand("host1,host2", "L") == V{"host1", "host2"});
  CHECK(slurm_hostlist_expand("node[01-04,07],gpu-a[1-2]", "L") ==
        V{"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"});
  CHECK(slurm_hostlist_expand("n[8-10]", "L") == V{"n8", "n9", "n10"});
  CHECK(slurm_hostlist_expand("n[098-100]", "L") == V{"n098", "n099", "n100"});
  CHECK(slurm_hostlist_expand("rack[1-2]-n[1,3]", "L") ==
        V{"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"});
  CHECK(slurm_hostlist_expand("127.0.0.[1-2]", "L") == V{"127.0.0.1", "127.0.0.2"});
  CHECK(slurm_hostlist_expand("x[5]y", "L") == V{"x5y"});
  CHECK(slurm_hostlist_expand("n[0-99999]", "L").size() == 100000);
}

TEST_CASE("a malformed slurm hostlist is one error naming the variable") {
  for (const char* bad : {"", "a,,b", "a,", "node[", "node]", "node[1-2", "node[]", "node[a-b]",
                          "node[4-1]", "node[1-]", "n[[1]]", "n[0-100000]", "n[1-9999999999]"}) {
    CAPTURE(bad);
    std::string msg;
    try {
      slurm_hostlist_expand(bad, "SLURM_JOB_NODELIST");
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(msg.rfind("bad SLURM_JOB_NODELIST='" + std::string(bad) + "'", 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("slurm tasks per node read counts and repeats") {
  using V = std::vector<int>;
  CHECK(slurm_tasks_per_node("4", "T") == V{4});
  CHECK(slurm_tasks_per_node("2(x3),1", "T") == V{2, 2, 2, 1});
  CHECK(slurm_tasks_per_node("1,3(x2)", "T") == V{1, 3, 3});
  for (const char* bad : {"", "2(x)", "2(x3", "(x3)", "0", "2(x0)", "a", "2,,1", "2(y3)", "-1"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(slurm_tasks_per_node(bad, "SLURM_TASKS_PER_NODE"),
                         doctest::Contains("bad SLURM_TASKS_PER_NODE='"), Error);
  }
}

TEST_CASE("the port derived from a job id stays within 10000..59999") {
  CHECK(port_from_job_id("1234", "J") == 11234);
  CHECK(port_from_job_id("51234", "J") == 11234);
  CHECK(port_from_job_id("49999", "J") == 59999);
  CHECK(port_from_job_id("3432382465", "J") == 10000 + 3432382465ull % 50000);
  CHECK(port_from_job_id("99999999999999999999999", "J") == 10000 + 49999);
  int hashed = port_from_job_id("kvs_4242_0", "J");
  CHECK(hashed >= 10000);
  CHECK(hashed <= 59999);
  CHECK(hashed == port_from_job_id("kvs_4242_0", "J"));  // the same on every rank
  CHECK(hashed != port_from_job_id("kvs_4243_0", "J"));
}

// --- each launcher -------------------------------------------------------------

TEST_CASE("fanout launch, torchrun and plain RANK/WORLD_SIZE read torchrun's names") {
  LauncherEnv e =
      read(with(kTorch, {{"FANOUT_LAUNCHER", "fanout-launch"}, {"FANOUT_JOB_SECRET", "s3cret"}}));
  CHECK(e.launcher == "fanout launch");
  CHECK(e.rank == 3);
  CHECK(e.world == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world == 2);
  CHECK(e.nodes == 2);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 29500);
  CHECK(e.secret == "s3cret");
  CHECK(e.job == "fanout-launch::4");
  CHECK(launcher_line(e) ==
        "fanout: launcher: fanout launch (4 ranks on 2 nodes, master 10.0.0.1:29500)");

  e = read(kTorch);
  CHECK(e.launcher == "RANK/WORLD_SIZE");
  CHECK(e.secret.empty());
  CHECK(e.job == "env::4");
  e = read(with(kTorch, {{"LOCAL_WORLD_SIZE", ""}}));  // empty reads as unset: all local
  CHECK(e.local_world == 4);
  CHECK(e.nodes == 1);

  // torchrun's static rendezvous: its store holds MASTER_PORT; the secret comes later.
  Env torch = with(kTorch, {{"TORCHELASTIC_RUN_ID", "none"},
                            {"TORCHELASTIC_RESTART_COUNT", "1"},
                            {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                            {"GROUP_WORLD_SIZE", "2"}});
  e = read(torch);
  CHECK(e.launcher == "torchrun");
  CHECK(e.torch_agent_store);
  CHECK(e.torch_store_key == "fanout/none/1");
  CHECK(e.secret.empty());
  CHECK(e.job == "torchrun:none.1:4");
  CHECK(launcher_line(e) ==
        "fanout: launcher: torchrun (run none, restart 1, 4 ranks on 2 nodes, static rendezvous "
        "through torchrun's store at 10.0.0.1:29500)");
  // c10d: MASTER_PORT is free for rank 0; the secret comes from the run's identity.
  e = read(with(torch, {{"TORCHELASTIC_USE_AGENT_STORE", "False"}}));
  CHECK_FALSE(e.torch_agent_store);
  CHECK(e.secret == "torchrun:none.1");
  CHECK(read(with(torch, {{"FANOUT_JOB_SECRET", "mine"}})).secret == "mine");
}

TEST_CASE("slurm: ranks from SLURM_*, the master from the nodelist, the port from the job id") {
  LauncherEnv e = read(kSlurm);
  CHECK(e.launcher == "slurm");
  CHECK(e.rank == 5);
  CHECK(e.world == 7);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world == 2);  // node 2 of 2,2,2,1
  CHECK(e.nodes == 4);
  CHECK(e.master_addr == "node01");
  CHECK(e.master_port == 11234);
  CHECK(e.secret == "slurm:1234.0");
  CHECK(e.job == "slurm:1234.0:7");
  CHECK(launcher_line(e) ==
        "fanout: launcher: slurm (job 1234.0, 7 ranks on 4 nodes, master node01:11234)");
  // The last node holds one task; --ntasks-per-node's variable wins over the list.
  e = read(with(kSlurm, {{"SLURM_PROCID", "6"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "3"}}));
  CHECK(e.local_world == 1);
  e = read(
      with(kSlurm, {{"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}}));
  CHECK(e.local_world == 4);
  CHECK(e.nodes == 2);
  // MASTER_ADDR and MASTER_PORT win; the step's nodelist is where rank 0 runs.
  e = read(with(kSlurm, {{"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "29400"}}));
  CHECK(e.master_addr == "10.1.1.1");
  CHECK(e.master_port == 29400);
  CHECK(read(with(kSlurm, {{"SLURM_STEP_NODELIST", "gpu[3-4]"}})).master_addr == "gpu3");
  Env one =
      with(kSlurm,
           {{"SLURM_JOB_NODELIST", "solo"}, {"SLURM_TASKS_PER_NODE", "7"}, {"SLURM_NODEID", "0"}});
  one.erase("SLURM_STEP_ID");
  e = read(one);
  CHECK(e.master_addr == "solo");
  CHECK(e.nodes == 1);
  CHECK(e.job == "slurm:1234:7");
}

TEST_CASE("MPI: Open MPI and PMI variables, master 127.0.0.1 only when every rank is local") {
  LauncherEnv e = read(kOmpi);
  CHECK(e.launcher == "open mpi");
  CHECK(e.rank == 1);
  CHECK(e.world == 2);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world == 2);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 10000 + 3432382465ull % 50000);
  CHECK(e.secret == "open mpi:3432382465");
  CHECK(e.job == "ompi:3432382465:2");
  CHECK(launcher_line(e) ==
        "fanout: launcher: open mpi (job 3432382465, 2 ranks on 1 node, "
        "master 127.0.0.1:" +
            std::to_string(e.master_port) + ")");
  e = read(kPmi);
  CHECK(e.launcher == "pmi");
  CHECK(e.rank == 2);
  CHECK(e.world == 4);
  CHECK(e.nodes == 2);
  CHECK(e.master_addr == "head");
  CHECK(e.master_port == 23456);
  CHECK(launcher_line(e) == "fanout: launcher: pmi (4 ranks on 2 nodes, master head:23456)");
  Env pmix = kPmi;
  pmix.erase("PMI_RANK");
  pmix["PMIX_RANK"] = "3";
  CHECK(read(pmix).rank == 3);
  // PMI's job id gives the port when MASTER_PORT is not set.
  Env pmi_job = with(kPmi, {{"PMI_JOBID", "777"}});
  pmi_job.erase("MASTER_PORT");
  CHECK(read(pmi_job).master_port == 10777);
}

TEST_CASE("explicit variables win over slurm and MPI, MPI over slurm's batch step") {
  Env all = with(with(kSlurm, kOmpi), kTorch);
  CHECK(read(all).launcher == "RANK/WORLD_SIZE");
  CHECK(read(with(all, {{"TORCHELASTIC_RUN_ID", "r"}})).launcher == "torchrun");
  CHECK(read(with(all, {{"FANOUT_LAUNCHER", "fanout-launch"}, {"TORCHELASTIC_RUN_ID", "r"}}))
            .launcher == "fanout launch");
  CHECK(read(with(kSlurm, kOmpi)).launcher == "open mpi");
  CHECK(read(with(kSlurm, kPmi)).launcher == "pmi");
  CHECK(read(with(kOmpi, kPmi)).launcher == "open mpi");
  // srun --mpi=pmi2 / pmix: PMI's rank without Hydra's local rank is srun's launch.
  CHECK(read(with(kSlurm, {{"PMI_RANK", kSlurm.at("SLURM_PROCID")}})).launcher == "slurm");
  CHECK(read(with(kSlurm, {{"PMIX_RANK", kSlurm.at("SLURM_PROCID")}})).launcher == "slurm");
}

// --- errors --------------------------------------------------------------------

TEST_CASE("nothing recognised: the error lists every launcher it looked for") {
  std::string msg = error_of({{"SLURM_JOB_ID", "1"}, {"PATH", "/bin"}});
  CHECK(msg.find("found no launcher's variables") != std::string::npos);
  for (const char* name : {"fanout launch", "torchrun", "RANK/WORLD_SIZE", "Open MPI",
                           "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    CAPTURE(name);
    CHECK(msg.find(name) != std::string::npos);
  }
  CHECK(msg.find('\n') == std::string::npos);
}

TEST_CASE("a missing, malformed or inconsistent variable is one error that names it") {
  struct Case {
    Env env;
    std::string phrase;
  };
  Env no_rank = kTorch;
  no_rank.erase("RANK");
  Env slurm_no_list = kSlurm;
  slurm_no_list.erase("SLURM_JOB_NODELIST");
  Env slurm_no_tasks = kSlurm;
  slurm_no_tasks.erase("SLURM_TASKS_PER_NODE");
  Env ompi_no_id = kOmpi;
  ompi_no_id.erase("OMPI_MCA_ess_base_jobid");
  Env pmi_no_port = kPmi;
  pmi_no_port.erase("MASTER_PORT");
  Env pmi_no_addr = kPmi;
  pmi_no_addr.erase("MASTER_ADDR");
  for (const Case& c : std::vector<Case>{
           {no_rank, "needs the environment variable RANK"},
           {with(kTorch, {{"RANK", "one"}}),
            "environment variable RANK: 'one' is not a whole number"},
           {with(kTorch, {{"RANK", "-1"}}), "environment variable RANK: '-1' is out of range"},
           {with(kTorch, {{"RANK", "4"}}), "RANK=4 is not below WORLD_SIZE=4"},
           {with(kTorch, {{"LOCAL_RANK", "2"}}), "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
           {with(kTorch, {{"LOCAL_WORLD_SIZE", "8"}}), "LOCAL_WORLD_SIZE=8 is above WORLD_SIZE=4"},
           {with(kTorch, {{"WORLD_SIZE", "0"}}),
            "environment variable WORLD_SIZE: '0' is out of range"},
           {with(kTorch, {{"MASTER_PORT", "70000"}}),
            "environment variable MASTER_PORT: '70000' is out of range (expected 1..65535)"},
           {with(kTorch, {{"MASTER_PORT", "0"}}),
            "environment variable MASTER_PORT: '0' is out of range"},
           {with(kTorch, {{"FANOUT_LAUNCHER", "mpirun"}}), "bad FANOUT_LAUNCHER='mpirun'"},
           {with(kTorch, {{"TORCHELASTIC_RUN_ID", "x"}, {"TORCHELASTIC_RESTART_COUNT", "z"}}),
            "environment variable TORCHELASTIC_RESTART_COUNT: 'z'"},
           {with(kSlurm, {{"SLURM_PROCID", "7"}}), "SLURM_PROCID=7 is not below SLURM_NTASKS=7"},
           {with(kSlurm, {{"SLURM_LOCALID", "2"}}),
            "SLURM_LOCALID=2 is not below SLURM_TASKS_PER_NODE=2"},
           {with(kSlurm, {{"SLURM_NODEID", "4"}}),
            "SLURM_NODEID=4 has no entry in "
            "SLURM_TASKS_PER_NODE='2(x3),1' (4 nodes)"},
           {with(kSlurm, {{"SLURM_TASKS_PER_NODE", "2(x3"}}), "bad SLURM_TASKS_PER_NODE='2(x3'"},
           {with(kSlurm, {{"SLURM_JOB_NODELIST", "node[1-"}}), "bad SLURM_JOB_NODELIST='node[1-'"},
           {with(kSlurm, {{"SLURM_JOB_ID", "12x"}}), "environment variable SLURM_JOB_ID: '12x'"},
           {slurm_no_list, "needs MASTER_ADDR or SLURM_JOB_NODELIST"},
           {slurm_no_tasks, "needs the environment variable SLURM_TASKS_PER_NODE"},
           {with(kOmpi, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}),
            "under Open MPI on 2 nodes needs MASTER_ADDR"},
           {ompi_no_id, "under Open MPI needs MASTER_PORT"},
           {with(kOmpi, {{"OMPI_COMM_WORLD_SIZE", "x"}}),
            "environment variable OMPI_COMM_WORLD_SIZE: 'x'"},
           {pmi_no_port, "under MPICH/PMI needs MASTER_PORT"},
           {pmi_no_addr, "under MPICH/PMI on 2 nodes needs MASTER_ADDR"},
           {with(kPmi, {{"MPI_LOCALNRANKS", "8"}}), "MPI_LOCALNRANKS=8 is above PMI_SIZE=4"},
       }) {
    CAPTURE(c.phrase);
    std::string msg = error_of(c.env);
    CHECK(msg.find(c.phrase) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    if (msg.find(c.phrase) == std::string::npos) MESSAGE("got: ", msg);
  }
}

TEST_CASE("every launcher's numbers go by fanout's number rules") {
  // Each variable that holds a number, in the environment of its launcher.
  const std::vector<std::pair<Env, std::string>> vars = {
      {kTorch, "RANK"},
      {kTorch, "WORLD_SIZE"},
      {kTorch, "LOCAL_RANK"},
      {kTorch, "LOCAL_WORLD_SIZE"},
      {kTorch, "MASTER_PORT"},
      {with(kTorch, {{"TORCHELASTIC_RUN_ID", "r"}, {"TORCHELASTIC_RESTART_COUNT", "0"}}),
       "TORCHELASTIC_RESTART_COUNT"},
      {with(kTorch, {{"TORCHELASTIC_RUN_ID", "r"}, {"GROUP_WORLD_SIZE", "2"}}), "GROUP_WORLD_SIZE"},
      {kSlurm, "SLURM_PROCID"},
      {kSlurm, "SLURM_NTASKS"},
      {kSlurm, "SLURM_LOCALID"},
      {kSlurm, "SLURM_NODEID"},
      {kSlurm, "SLURM_JOB_ID"},
      {with(kSlurm, {{"SLURM_NNODES", "4"}}), "SLURM_NNODES"},
      {with(kSlurm, {{"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_NTASKS", "8"}}),
       "SLURM_NTASKS_PER_NODE"},
      {kOmpi, "OMPI_COMM_WORLD_RANK"},
      {kOmpi, "OMPI_COMM_WORLD_SIZE"},
      {kOmpi, "OMPI_COMM_WORLD_LOCAL_RANK"},
      {kOmpi, "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {kPmi, "PMI_RANK"},
      {kPmi, "PMI_SIZE"},
      {kPmi, "MPI_LOCALRANKID"},
      {kPmi, "MPI_LOCALNRANKS"},
  };
  for (const auto& [env, name] : vars) {
    CAPTURE(name);
    REQUIRE(error_of(env).empty());
    const std::string value = env.at(name);
    // Spaces around it, a sign, another base, a fraction or an exponent: never a number here.
    for (const std::string& bad :
         {" " + value, value + " ", "+" + value, "0x" + value, value + ".0", value + "e0"}) {
      CAPTURE(bad);
      std::string msg = error_of(with(env, {{name, bad}}));
      CHECK(msg.rfind("environment variable " + name + ": '" + bad + "' is not a whole number",
                      0) == 0);
      CHECK(msg.find('\n') == std::string::npos);
    }
    // Leading zeros are decimal, never octal.
    CHECK(error_of(with(env, {{name, "00" + value}})).empty());
  }
  CHECK(read(with(kTorch, {{"RANK", "010"}, {"WORLD_SIZE", "011"}})).rank == 10);
}

TEST_CASE("a world past what one job holds is refused naming its variable and the limit") {
  const std::string over = std::to_string(kMaxWorldSize + 1);
  for (const auto& [env, name] : std::vector<std::pair<Env, std::string>>{
           {with(kTorch, {{"WORLD_SIZE", over}}), "WORLD_SIZE"},
           {with(kSlurm, {{"SLURM_NTASKS", over}}), "SLURM_NTASKS"},
           {with(kOmpi, {{"OMPI_COMM_WORLD_SIZE", over}}), "OMPI_COMM_WORLD_SIZE"},
           {with(kPmi, {{"PMI_SIZE", "100000"}}), "PMI_SIZE"},
       }) {
    CAPTURE(name);
    const std::string msg = error_of(env);
    CHECK(msg.rfind(name + "=" + env.at(name) +
                        " is more ranks than one fanout job holds (at most " +
                        std::to_string(kMaxWorldSize),
                    0) == 0);
  }
  // The limit itself is a world, and each reader says which variable gave it.
  LauncherEnv e = read(with(kTorch, {{"WORLD_SIZE", std::to_string(kMaxWorldSize)}}));
  CHECK(e.world == kMaxWorldSize);
  CHECK(e.world_var == "WORLD_SIZE");
  CHECK(read(kSlurm).world_var == "SLURM_NTASKS");
  CHECK(read(kOmpi).world_var == "OMPI_COMM_WORLD_SIZE");
  CHECK(read(kPmi).world_var == "PMI_SIZE");
}
