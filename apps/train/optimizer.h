#pragma once
// AdamW over an engine's shards (engine/parallel/shard_set.h), with fp32 state
// that lives on the device that owns each shard (dp: the primary holds all of
// it; zero1: each device 1/N; a pipeline: each stage its own). A step: the global gradient norm
// from per-shard partial sums of squares, torch's clip_grad_norm_ factor, AdamW on every shard with
// weight decay only on tensors of >= 2 dims; the engine then brings the replicas up to date.
// Offloaded (--offload optimizer, DataParallel's shards only), the fp32 master weights and
// the state live in host memory instead and the update runs on the host's threads
// (Note [Optimizer offload], optimizer.cpp).

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/shard_set.h"
#include "models/llama_layout.h"
#include "ops/adamw.h"

namespace fanout::train {

// Contiguous runs of the flat buffer with the same decay setting.
struct DecayRun {
  int64_t begin, end;
  bool decay;
};
// `copies` layouts one after the other (a tensor-parallel grid's flat space:
// each rank's shard layout in turn).
std::vector<DecayRun> decay_runs(const models::LlamaLayout& layout, int copies = 1);

// Note [Optimizer offload] (optimizer.cpp): master weights, m and v in host memory,
// the update on host threads; the same bits as without.
struct OptimizerOffload {
  bool enabled = false;
  // Elements copied and updated at a time (1 MiB of fp32); tests make it small.
  int64_t chunk = int64_t{1} << 18;
};

class Optimizer {
 public:
  // shards: the engine's (it outlives the optimizer).
  Optimizer(parallel::ShardSet& shards, std::vector<DecayRun> runs, ops::AdamWConfig config);
  // Offloaded, the host master is read from the engine's weights at the first step
  // and at the first after state_from_host; weights loaded into the engine at any
  // other time are not seen.
  Optimizer(parallel::DataParallel& dp, std::vector<DecayRun> runs, ops::AdamWConfig config,
            OptimizerOffload offload = {});

  bool offloaded() const { return offload_.enabled; }

  // After dp.reduce_gradients(). Returns the pre-clip global gradient norm; when
  // it is NaN or Inf nothing is updated (the caller stops the run).
  double step(int64_t step, float lr, double clip);

  // The whole state in flat layout order (for checkpoints, device-count free).
  // Offloaded, state_from_host also has the next step take the engine's weights
  // (the checkpoint's, loaded by then) as the host master.
  void state_to_host(std::vector<float>& m, std::vector<float>& v);
  void state_from_host(const std::vector<float>& m, const std::vector<float>& v);

 private:
  // Offloaded: the shard's fp32 master, m, v, and its gradients' landing place.
  struct HostState {
    HostBuffer master, m, v, grads;
    bool master_stale = false;  // read it from the engine's weights at the next step
  };
  struct ShardState {
    int64_t begin, end;
    Tensor m, v, norm;  // m, v undefined when offloaded
    HostState host;
  };
  void ensure_state();
  // Shard i's offloaded update (Note [Optimizer offload]).
  void update_on_host(int i, int64_t step, float lr, float scale);
  void host_state_to_host(HostBuffer HostState::*which, float* out);

  std::unique_ptr<parallel::ShardSet> owned_;  // DataParallel's, made here
  parallel::ShardSet& set_;
  std::vector<DecayRun> runs_;
  ops::AdamWConfig config_;
  OptimizerOffload offload_;
  // Offloaded state_to_host: the shards live on several processes (zero1-3 across
  // processes) and are gathered through the engine.
  bool gather_state_ = false;
  std::vector<ShardState> state_;
};

}  // namespace fanout::train
