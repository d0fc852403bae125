#pragma once
// ReplicaGroup: the peers a replica sums and gathers with -- this process's
// other devices (Collectives: local copies, or NCCL over distinct GPUs), or, with
// one replica per process, the other processes (a distributed::ProcessGroup).
// The one place that picks between the two: DataParallel and the zero/ storage
// call these five operations and never ask which one runs underneath.

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/distributed/process_group.h"
#include "engine/parallel/collectives/collectives.h"

namespace fanout::parallel {

class ReplicaGroup {
 public:
  // `devices`: this process's replicas, in order; `processes`: the other ranks
  // (one replica each), or nullptr in a single-process run. Sums travel in
  // `sum_dtype` (f32, or bf16 under --grad-comm bf16).
  ReplicaGroup(const std::vector<Device>& devices, distributed::ProcessGroup* processes,
               DType sum_dtype);

  bool across_processes() const { return processes_ != nullptr; }
  distributed::ProcessGroup* processes() const { return processes_; }
  // Shard owners: the devices of this process, or the processes.
  int ranks() const;
  // The rank of this process's first replica.
  int rank0() const;
  // The in-process back-end's name ("local", "nccl").
  const char* local_name() const { return local_->name(); }

  // bufs[i][begin, end) summed; bufs[0] holds the sum (across processes: every
  // rank's bufs[0] holds the sum over all ranks).
  void sum(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int64_t begin,
           int64_t end);
  // Owner r's piece [bounds[r], bounds[r+1]) (cut to [begin, end)) to every copy.
  void all_gather(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                  const std::vector<int64_t>& bounds, int64_t begin, int64_t end);
  // Owner r's piece <- the sum of that piece over every copy.
  void reduce_scatter(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                      const std::vector<int64_t>& bounds, int64_t begin, int64_t end);
  // bufs[0][begin, end) to this process's other replicas (every process holds
  // the same values already, or is handed them by the caller).
  void broadcast(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                 int64_t begin, int64_t end);
  // values[0..n) summed over the processes; nothing to do in one process.
  void sum_host(double* values, int n);
  // Every byte sent so far: between this process's devices and to other processes.
  int64_t bytes_moved() const;

 private:
  std::unique_ptr<Collectives> local_;
  distributed::ProcessGroup* processes_;
  int devices_;
};

}  // namespace fanout::parallel
