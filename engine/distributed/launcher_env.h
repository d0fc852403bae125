#pragma once
// Which launcher started this process, read from its environment variables:
// fanout launch, torchrun, plain RANK/WORLD_SIZE, Slurm's srun, Open MPI and
// MPICH/Intel MPI (PMI). Each gives this rank's place in the world, the
// master's address, the job's secret and a description of the job that every
// rank must agree on. Pure functions of a lookup, so tests feed them a map.

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fanout::distributed {

// One environment variable: its value, or nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// The process environment.
std::optional<std::string> env_lookup_process(const std::string& name);

// The most ranks one job may have: rank 0's rendezvous keeps a TCP connection
// to every rank and serves them all from one thread, and a Gloo mesh tops out
// far below (distributed::kMaxGlooWorld). 16384 is as many GPUs as the largest
// published data-parallel Llama run (Llama 3 405B); a WORLD_SIZE past it is a
// mistake, refused before anything connects.
constexpr int kMaxWorldSize = 16384;

struct LauncherEnv {
  std::string
      launcher;        // "fanout launch", "torchrun", "RANK/WORLD_SIZE", "slurm", "open mpi", "pmi"
  std::string job_id;  // the launcher's id of the job ("1234.0"), "" when it gives none
  int rank = 0, world = 1, local_rank = 0, local_world = 1, nodes = 1;
  std::string world_var = "WORLD_SIZE";  // where `world` came from ("SLURM_NTASKS", ...)
  std::string master_addr;
  int master_port = 0;
  // The rendezvous' secret and the job description every hello carries
  // ("slurm:1234.0:4"); see launcher_env_read for where each comes from.
  std::string secret, job;
  // torchrun's static rendezvous: MASTER_PORT is torchrun's own TCPStore
  // (TORCHELASTIC_USE_AGENT_STORE=True); rank 0 serves on a free port and
  // publishes it there under torch_store_key.
  bool torch_agent_store = false;
  std::string torch_store_key;  // "fanout/<run id>/<restart>"
};

// Recognises the launcher, in this order: fanout launch (FANOUT_LAUNCHER),
// torchrun (TORCHELASTIC_RUN_ID), RANK/WORLD_SIZE, Open MPI, PMI, Slurm (Note
// [Launcher precedence]). Every number is read by fanout's number rules
// (engine/core/number_text.h). Throws fanout::Error naming a missing, malformed
// or inconsistent variable, a world past kMaxWorldSize, or listing what it
// looked for when nothing is there.
LauncherEnv launcher_env_read(const EnvLookup& get);

// Whether any launcher's selecting variable is set (FANOUT_LAUNCHER,
// TORCHELASTIC_RUN_ID, RANK, WORLD_SIZE, OMPI_COMM_WORLD_RANK, PMI_RANK,
// PMIX_RANK, SLURM_PROCID): this process is one rank of a launched job.
bool launcher_env_found(const EnvLookup& get);

// "fanout: launcher: slurm (job 1234.0, 4 ranks on 2 nodes, master node01:12345)"
std::string launcher_line(const LauncherEnv& e);

// --- Slurm's and MPI's formats ----------------------------------------------

// Slurm's hostlist: "node[01-04,07],gpu-a[1-2]" -> node01 .. node04, node07,
// gpu-a1, gpu-a2 (zero padding kept); "a,b"; "a". Throws fanout::Error naming
// `what` (the variable) on a malformed list or one of more than 100000 hosts.
std::vector<std::string> slurm_hostlist_expand(const std::string& list, const std::string& what);
// Slurm's tasks per node: "2(x3),1" -> 2, 2, 2, 1.
std::vector<int> slurm_tasks_per_node(const std::string& value, const std::string& what);
// The rendezvous port derived from a launcher's job id, the same on every rank:
// 10000 + id % 50000 for a decimal id (Slurm's 1234 -> 11234), 10000 + FNV-1a(id)
// % 50000 for any other text; always within 10000..59999, above the common
// service ports. Two jobs whose ids agree modulo 50000 on one master clash: set
// MASTER_PORT then.
int port_from_job_id(const std::string& id, const std::string& what);

// 32 hex characters from /dev/urandom: the secret of a rendezvous fanout starts
// itself (one fanout launch attempt, a static torchrun rendezvous). Throws
// fanout::Error when /dev/urandom cannot be read.
std::string random_secret();

}  // namespace fanout::distributed
