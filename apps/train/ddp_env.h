#pragma once
// The multi-process side of a run (--strategy ddp): the launcher's environment
// (fanout launch, torchrun, Slurm, MPI: launcher_env.h), this rank's device, the
// rendezvous and process group, and each rank's rows of a global batch
// (DistributedSampler semantics: disjoint, together the whole). A
// single-process run is the world of one.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "apps/data/data_loader.h"
#include "engine/core/device.h"
#include "engine/distributed/launcher_env.h"
#include "engine/distributed/process_group.h"
#include "engine/distributed/rendezvous.h"
#include "engine/parallel/data_parallel.h"

namespace fanout::train {

// rank, world, local_rank, local_world, master_addr, master_port, launcher,
// secret, job: see LauncherEnv.
struct DdpEnv : distributed::LauncherEnv {
  bool enabled = false;

  bool is_main() const { return rank == 0; }
  // Rows [first, first + count) of a global batch of `rows` for this rank.
  std::pair<int64_t, int64_t> rows_of(int64_t rows) const;
  // This rank's rows of a global batch (all of them unless ddp), pointing into it.
  parallel::HostBatch batch_rows(const data::Batch& b) const;
  parallel::HostBatch batch_rows(data::Batch&&) const = delete;  // would point into a temporary
};

// Reads the environment (launcher_env_read); throws fanout::Error naming a
// missing or bad variable, or the launchers it looked for.
DdpEnv ddp_env_from_environment();
DdpEnv ddp_env_from(const distributed::EnvLookup& get);
// This rank's device: a bare kind (cpu, cuda) takes LOCAL_RANK; a list of
// LOCAL_WORLD_SIZE devices gives entry LOCAL_RANK.
Device ddp_device(const DdpEnv& env, const std::vector<Device>& devices);
// Throws fanout::Error when a GPU is listed twice: ddp puts one process on each
// device, and NCCL refuses two ranks on one GPU.
void ddp_check_distinct_gpus(const std::vector<Device>& devices);

struct DdpGroup {
  std::unique_ptr<distributed::Rendezvous> rendezvous;
  std::unique_ptr<distributed::ProcessGroup> group;
};
// Meets the other ranks (under torchrun's static rendezvous through its store,
// Note [Rendezvous under torchrun's static launch]) and builds the process
// group. Rank 0 first prints launcher_line(env) on stdout when `announce`.
DdpGroup ddp_connect(const DdpEnv& env, Device device, double timeout_s, bool announce = true);

}  // namespace fanout::train
