#pragma once
// Benchmarks shared by `fanout bench` and the walkthrough: one training mode of
// the DataParallel engine timed on a synthetic batch (tokens/s, the step-time
// breakdown, peak bytes per device), and the CPU op micro-benchmark.

#include <string>
#include <vector>

#include "apps/train/ddp_env.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_config.h"

namespace fanout::train {

struct BenchMode {
  std::string name;  // dp, dp-replicas, dp-overlap, zero1
  parallel::Strategy strategy = parallel::Strategy::dp;
  parallel::LossOn loss_on = parallel::LossOn::output;
  bool overlap = false;
};
// "dp,dp-replicas,dp-overlap,zero1,ddp" (or "all"); unknown names are errors.
// ddp is measured in separate processes (fanout launch), the others in this one.
std::vector<BenchMode> bench_modes_parse(const std::string& list);

struct DevicePeak {
  std::string device;
  size_t peak_bytes = 0;
};

struct BenchResult {
  std::string mode, devices;
  std::string precision = "fp32", grad_comm = "fp32";
  double tokens_per_s = 0, step_s = 0, last_loss = 0;
  parallel::PhaseTimes phases;  // mean seconds per step
  parallel::CommBytes comm;     // mean bytes per step, from the engine's counters
  std::vector<DevicePeak> peaks;
};

struct BenchSetup {
  models::LlamaConfig config;
  std::vector<Device> devices;  // ddp: this rank's one device
  // ddp: this rank's rows of every batch, gradients summed through `group`.
  DdpEnv ddp;
  parallel::ProcessGroup* group = nullptr;
  int64_t batch_size = 16, seq_len = 128;
  int steps = 5, warmup = 1;
  double bucket_mb = 25.0;
  // The replicas' working dtype (bf16: mixed precision) and the gradient sums'.
  DType working = DType::f32, grad_comm = DType::f32;
};

BenchResult bench_mode(const BenchSetup& setup, const BenchMode& mode);

struct OpBenchRow {
  std::string op, shape;
  double gflop = 0, seconds = 0;
  double gflops() const { return seconds > 0 ? gflop / seconds : 0; }
};
// matmul (forward and backward) at the preset's projection shapes and causal
// attention at its head shape, on one device, for `tokens` rows of seq_len.
// dtype: the inputs' (f32, or bf16 with f32 gradients and lm_head logits).
std::vector<OpBenchRow> bench_ops(const models::LlamaConfig& config, Device device, int64_t batch,
                                  int64_t seq_len, int repeats, DType dtype = DType::f32);

}  // namespace fanout::train
