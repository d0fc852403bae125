#pragma once
// Training: one run's parts, assembled in one place -- the Llama replicas under
// the engine (DataParallel over this process's devices; one replica per
// process under ddp; or, under --pp, a Pipeline of stages over the devices'
// grid), their initial weights (broadcast from rank 0 across
// processes), and AdamW -- and the step over them. fanout train, eval, bench,
// walkthrough and the data-parallel example all build their runs here.
//
// A step is forward_backward (scatter, forward, loss, backward), then
// reduce_gradients and optimizer_step; step() runs all three. They stay apart
// for the callers that look in between: the trainer agrees on the loss across
// ranks before it updates, the walkthrough narrates each phase.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/train/optimizer.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/distributed/process_group.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/pipeline/pipeline.h"
#include "models/llama_config.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "ops/adamw.h"

namespace fanout::train {

struct TrainingOptions {
  models::LlamaConfig config;
  std::vector<Device> devices;
  std::optional<Device> output_device;  // default: devices[0]
  std::vector<int64_t> chunk_sizes;     // rows per replica; empty: split evenly
  parallel::Strategy strategy = parallel::Strategy::dp;
  parallel::LossOn loss_on = parallel::LossOn::replicas;
  bool overlap = false;
  double bucket_mb = 25.0;
  DType working = DType::f32;                  // bf16: mixed precision
  DType grad_comm = DType::f32;                // bf16: gradient sums travel in bf16
  distributed::ProcessGroup* group = nullptr;  // ddp, or zero1-3 across processes
  ops::AdamWConfig adam;
  // Note [Recompute] in models/llama_model_backward.cpp.
  bool recompute = false;
  // Note [Step graphs] in engine/parallel/data_parallel_graphs.cpp; not with a pipeline.
  bool graphs = false;
  // AdamW's master weights and state in host memory, the update on host threads
  // (Note [Optimizer offload], apps/train/optimizer.cpp); not with a pipeline.
  bool offload_optimizer = false;
  // Pipeline parallelism, when a cut is given (stages + 1 unit bounds,
  // engine/parallel/pipeline/balance.h; one stage is a pipeline too): the
  // devices are replicas x stages (x tensor ranks), replica-major.
  int stages = 1;
  // Tensor parallelism (Note [Tensor parallelism], models/llama_tensor.cpp): each
  // stage split over `tensor` devices; the devices are replicas x stages x
  // tensor ranks. Runs through the pipeline engine (one stage without --pp).
  int tensor = 1;
  bool sequence_parallel = false;  // Note [Sequence parallelism], models/llama_tensor.cpp
  parallel::PipeSchedule pipe_schedule = parallel::PipeSchedule::one_f_one_b;
  int micro_batches = 0;  // per replica and step; 0: 2 x stages
  std::vector<int> cut;
  // Test hook (DataParallelOptions::fault_hook).
  std::function<void(int replica, const std::string& phase)> fault_hook;
};

// Where the initial weights come from: the whole fp32 values (a checkpoint,
// --init), a loader that fills the primary model (an HF checkpoint directory),
// or else random from `seed` (every process draws the same values).
struct InitialWeights {
  const float* values = nullptr;
  std::function<void(models::LlamaModel& primary)> load;
  uint64_t seed = 1;
};

// The options for a mode of the table (engine/parallel/strategy.h).
void training_options_set_mode(TrainingOptions& o, const parallel::Mode& mode);

class Training {
 public:
  Training(TrainingOptions options, const InitialWeights& initial);
  Training(const Training&) = delete;
  Training& operator=(const Training&) = delete;

  // The data-parallel engine, or (pipelined()) the pipeline.
  bool pipelined() const { return pipe_ != nullptr; }
  parallel::DataParallel& engine();
  parallel::Pipeline& pipeline();
  // Whether the update is sharded across processes (checkpoints gather from every rank).
  bool sharded_across_processes() const;
  models::LlamaModel& primary();
  Optimizer& optimizer() { return *opt_; }
  const models::LlamaLayout& layout() const { return layout_; }
  const TrainingOptions& options() const { return options_; }

  // Gradients zeroed, then every micro-batch's forward and backward (they
  // accumulate); the loss is normalised by `normalizer`, the counted tokens of
  // the whole global batch. Returns this process's loss sum and counted tokens.
  parallel::LossStats forward_backward(const std::vector<parallel::HostBatch>& micro,
                                       double normalizer);
  parallel::LossStats forward_backward(const parallel::HostBatch& batch, double normalizer);
  void reduce_gradients();
  // Forward only: the loss sum and counted tokens of a batch.
  parallel::LossStats evaluate(const parallel::HostBatch& batch);
  // AdamW at `lr` after clipping to `clip` (0: none); the pre-clip global
  // gradient norm, or a NaN/Inf one with nothing updated.
  double optimizer_step(int64_t step, float lr, double clip);

  struct StepResult {
    parallel::LossStats loss;
    double grad_norm = 0;
  };
  // The three above, in order.
  StepResult step(const parallel::HostBatch& batch, double normalizer, int64_t step, float lr,
                  double clip);

  // The whole fp32 weights on the host, whatever the strategy (every process
  // takes part across processes).
  std::vector<float> params_to_host();

 private:
  TrainingOptions options_;
  models::LlamaLayout layout_;
  void make_pipeline(const InitialWeights& initial);

  std::unique_ptr<parallel::DataParallel> dp_;
  std::unique_ptr<parallel::Pipeline> pipe_;
  std::unique_ptr<Optimizer> opt_;
};

}  // namespace fanout::train
