#pragma once
// A small Llama, synthetic batches with padded rows, and runs of the DataParallel
// engine plus AdamW for a few steps, for the N-devices-equal-one invariant.

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/parallel/data_parallel.h"
#include "engine/parallel/pipeline/pipeline.h"
#include "models/llama_config.h"

namespace fanout::test {

models::LlamaConfig small_test_config();

struct TestBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> inputs, targets;
  parallel::HostBatch host() const { return {B, T, inputs.data(), targets.data()}; }
  int64_t counted() const;
};
// Random tokens; row r keeps (T - pad[r]) counted targets, the rest ignored.
TestBatch make_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed,
                     const std::vector<int64_t>& pad = {});

// Every parallel mode the invariant is tested for.
struct ParallelMode {
  const char* name;
  parallel::Strategy strategy;
  parallel::LossOn loss_on;
  bool overlap;
};
extern const std::vector<ParallelMode> kParallelModes;
// Options for a mode on `devices`; bucket_mb 0.02 cuts the test model into four buckets.
parallel::DataParallelOptions mode_options(const ParallelMode& m, const std::string& devices);

struct RunResult {
  std::vector<double> losses;      // per step, before the update
  std::vector<double> grad_norms;  // per step, before clipping
  std::vector<float> first_grads;  // the reduced gradients of step 1 (whole buffer)
  std::vector<float> init_params, final_params;
  parallel::CommBytes last_step_bytes;  // the engine's byte counters over the last step
};

// `steps` AdamW steps (lr 1e-2, wd 0.1, clip 1.0) on the same batch; `working` is
// the replicas' working dtype (bf16: mixed precision); `model` defaults to
// small_test_config(); `fused_classifier` sets the replicas' loss path (Note [Fused
// classifier]; unset: the model's default for its device).
RunResult run_data_parallel(parallel::DataParallelOptions options, const TestBatch& batch,
                            int steps = 3, uint64_t seed = 7, DType working = DType::f32,
                            const models::LlamaConfig* model = nullptr,
                            std::optional<bool> fused_classifier = std::nullopt);

// A Pipeline of the test model: `stages` x replicas CPU devices (cpu:0,
// cpu:1, ...), the cut balanced by parameters unless given; hooks as in
// PipelineOptions.
struct PipelineSetup {
  int stages = 2, replicas = 1, micro_batches = 2;
  int tensor = 1;         // tensor-parallel ranks per stage (devices: replicas x stages x tensor)
  bool sequence = false;  // sequence parallelism among the tensor ranks
  DType grad_comm = DType::f32;  // the replicas' gradient sums (--grad-comm)
  parallel::PipeSchedule schedule = parallel::PipeSchedule::one_f_one_b;
  std::vector<int> cut;
  bool recompute = false;
  parallel::Strategy strategy = parallel::Strategy::dp;  // dp, zero1 or zero2 over the replicas
  bool overlap = false;
  std::string devices;  // empty: cpu:0..cpu:(stages * replicas * tensor - 1)
  std::function<void(int, int, const parallel::Action&)> fault_hook;
  std::function<void(Stream&, int, int, const parallel::Action&)> delay_hook;
};
// A delay_hook that queues a sleep of 0-3 ms (random, from `seed`) on the
// stage's stream before each action, counting them in `delayed`.
std::function<void(Stream&, int, int, const parallel::Action&)> random_delay_hook(
    unsigned seed, std::atomic<int>& delayed);
std::unique_ptr<parallel::Pipeline> make_pipeline(const PipelineSetup& setup,
                                                  const models::LlamaConfig& config,
                                                  DType working = DType::f32);
// As run_data_parallel, through a pipeline.
RunResult run_pipeline(const PipelineSetup& setup, const TestBatch& batch, int steps = 3,
                       uint64_t seed = 7, DType working = DType::f32,
                       const models::LlamaConfig* model = nullptr);

// got against ref (doctest CHECKs, relative tolerances): losses and grad norms
// per step, each tensor's gradient after step 1 (rel_l2, tensors of `config`),
// the change of the weights over the run; the reference must have moved.
void check_runs_close(const RunResult& got, const RunResult& ref, const models::LlamaConfig& config,
                      double loss_tol, double grad_tol, double update_tol);

// ||a - b|| / ||b||
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);
std::vector<float> difference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace fanout::test
