#pragma once
// The multi-process side of a run (--strategy ddp): torchrun's environment
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), this
// rank's device, the rendezvous and process group, and each rank's rows of a
// global batch (DistributedSampler semantics: disjoint, together the whole).
// A single-process run is the world of one.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/parallel/process_group.h"
#include "engine/parallel/rendezvous.h"

namespace fanout::train {

struct DdpEnv {
  bool enabled = false;
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string master_addr;
  int master_port = 0;

  bool is_main() const { return rank == 0; }
  // Rows [first, first + count) of a global batch of `rows` for this rank.
  std::pair<int64_t, int64_t> rows_of(int64_t rows) const;
};

// Reads the environment; throws fanout::Error naming a missing or bad variable.
DdpEnv ddp_env_from_environment();
// This rank's device: a bare kind (cpu, cuda) takes LOCAL_RANK; a list of
// LOCAL_WORLD_SIZE devices gives entry LOCAL_RANK.
Device ddp_device(const DdpEnv& env, const std::vector<Device>& devices);

struct DdpGroup {
  std::unique_ptr<parallel::Rendezvous> rendezvous;
  std::unique_ptr<parallel::ProcessGroup> group;
};
DdpGroup ddp_connect(const DdpEnv& env, Device device, double timeout_s);

}  // namespace fanout::train
