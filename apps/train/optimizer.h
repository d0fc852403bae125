#pragma once
// AdamW over an engine's shards (engine/parallel/shard_set.h), with fp32 state
// that lives on the device that owns each shard (dp: the primary holds all of
// it; zero1: each device 1/N; a pipeline: each stage its own). A step: the global gradient norm
// from per-shard partial sums of squares, torch's clip_grad_norm_ factor, AdamW on every shard with
// weight decay only on tensors of >= 2 dims; the engine then brings the replicas up to date.

#include <cstdint>
#include <vector>

#include <memory>

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

class Optimizer {
 public:
  // shards: the engine's (it outlives the optimizer).
  Optimizer(parallel::ShardSet& shards, std::vector<DecayRun> runs, ops::AdamWConfig config);
  Optimizer(parallel::DataParallel& dp, std::vector<DecayRun> runs, ops::AdamWConfig config);

  // After dp.reduce_gradients(). Returns the pre-clip global gradient norm; when
  // it is NaN or Inf nothing is updated (the caller stops the run).
  double step(int64_t step, float lr, double clip);

  // The whole state in flat layout order (for checkpoints, device-count free).
  void state_to_host(std::vector<float>& m, std::vector<float>& v);
  void state_from_host(const std::vector<float>& m, const std::vector<float>& v);

 private:
  void ensure_state();
  struct ShardState {
    int64_t begin, end;
    Tensor m, v, norm;
  };
  std::unique_ptr<parallel::ShardSet> owned_;  // DataParallel's, made here
  parallel::ShardSet& set_;
  std::vector<DecayRun> runs_;
  ops::AdamWConfig config_;
  std::vector<ShardState> state_;
};

}  // namespace fanout::train
