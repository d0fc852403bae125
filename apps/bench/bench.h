#pragma once
// Benchmarks shared by `fanout bench` and the walkthrough: one training mode of
// the DataParallel engine timed step by step on a synthetic batch (the median
// step and its spread, tokens/s, the step-time breakdown, peak bytes per device
// and per kind), the memory table that compares the modes' peaks, and the CPU op
// micro-benchmark.

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/presentation/bench_result.h"
#include "apps/presentation/step_times.h"
#include "apps/train/ddp_env.h"
#include "engine/core/allocator.h"
#include "engine/core/op_profile.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_config.h"

namespace fanout::bench {

// A comma-separated list of mode names (engine/parallel/strategy.h's table),
// or "all"; dp-replicas is another name for dp (older scripts use it). Each mode
// once, in the order given; an unknown name is an error naming the valid ones.
// ddp is measured in separate processes (fanout launch, as `fanout launch --
// train --strategy ddp` starts them), the others in this one.
std::vector<parallel::Mode> bench_modes_parse(const std::string& list);

struct BenchSetup {
  models::LlamaConfig config;
  std::vector<Device> devices;  // ddp: this rank's one device
  // ddp: this rank's rows of every batch, gradients summed through `group`.
  train::DdpEnv ddp;
  distributed::ProcessGroup* group = nullptr;
  int64_t batch_size = 16, seq_len = 128;
  // After `warmup` untimed steps, timed steps until at least `steps` of them and
  // at least `min_seconds` of their time (one machine's load varies over seconds:
  // a few steps measure the moment, not the mode). Under ddp the ranks agree on
  // when to stop.
  // The defaults: a default `fanout bench` (15 rows) takes about 20 s on a busy
  // 2-core machine.
  int steps = 8, warmup = 1;
  double min_seconds = 0.5;
  double bucket_mb = 25.0;
  // The replicas' working dtype (bf16: mixed precision) and the gradient sums'.
  DType working = DType::f32, grad_comm = DType::f32;
  // Profile kernel classes (engine/core/op_profile.h) over one extra step.
  bool profile_kernels = false;
  // train's --recompute and --offload optimizer (dp, overlap, zero1-3 rows; the
  // others fail with the reason), for every row.
  bool recompute = false, offload = false;
  // train's --graphs: on (dp and zero1 rows; the others fail with the reason), off,
  // or auto (on for the rows that can record, where every device is a CUDA device).
  std::string graphs = "off";
};

// Peaks are measured from the first timed step (every device's peaks reset
// there), so each mode's are its own whatever ran before it.
presentation::BenchResult bench_mode(const BenchSetup& setup, const parallel::Mode& mode);

// --- the memory table ---------------------------------------------------------

// The kinds the memory table shows, in column order.
const std::vector<MemTag>& bench_memory_kinds();
// The result the memory ratios divide by: dp in `precision` (its primary,
// peaks[0], holds whole weights, gradients and AdamW state), or nullptr.
const presentation::BenchResult* bench_memory_baseline(
    const std::vector<presentation::BenchResult>& results, const std::string& precision);
// r's largest device total over base's primary total (0 if either has no peaks).
double bench_memory_ratio(const presentation::BenchResult& r,
                          const presentation::BenchResult& base);
// One row per result and device: its label, the device, the peak of each kind and
// the total; on the row of a result's largest device, the ratio to the baseline
// of its precision ("-" where there is none); then a line naming the baselines.
// Fitted to `width` columns (text_table.h; 0: --wide, one block as before).
std::string bench_memory_table(const std::vector<presentation::BenchResult>& rows,
                               size_t width = 0);

// --- JSON -----------------------------------------------------------------------

// {"scatter": seconds, "replicate": ..., "optimizer": ...}
nlohmann::json bench_phases_json(const parallel::PhaseTimes& p);
// One row of `fanout bench --json`: "status": "ok" with the figures (tokens_per_s
// and step_s from the median step, step_s_q1 and step_s_q3 its quartiles, spread
// half their distance over the median, timed_steps; the speed-up over `base_tps`,
// null when that is 0; memory_vs_dp against dp in the row's precision among
// `ran`, the rows that ran), or "status": "failed" with "reason".
nlohmann::json bench_row_json(const presentation::BenchResult& r, double base_tps,
                              const std::vector<presentation::BenchResult>& ran);

// One line per pipeline row that ran: its stages, micro-batches and bubble,
// measured and the schedule's.
std::vector<std::string> bench_bubble_lines(const std::vector<presentation::BenchResult>& ran);

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

}  // namespace fanout::bench
