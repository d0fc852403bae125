#pragma once
// Where a step's FLOPs and time go, for `fanout bench --mfu --kernels`: model FLOPs
// utilisation (the FLOPs one training token costs, 6N for the GEMMs plus the causal
// attention's products, over the device's bf16 or fp32 GEMM peak measured in the
// same run, so no datasheet figure is needed), and one step's time by kernel class
// (engine/core/op_profile.h).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench/bench.h"

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "models/llama_config.h"

namespace fanout::bench {

// Training FLOPs per token at sequence length T: 6 x (the parameters GEMMs
// multiply: q, k, v, o, gate, up, down of every layer and the lm_head; the
// embedding is a gather and the norms are element-wise) plus 6 L H D T / 2 x 2
// for attention (QK^T and PV, 2 FLOPs per multiply-add, over the T/2 keys a query
// sees on average under the causal mask; x3 for forward and backward).
double model_flops_per_token(const models::LlamaConfig& c, int64_t T);

struct GemmPeak {
  double flops_per_s = 0;  // the best of the timed repeats
  int64_t M = 0, N = 0, K = 0;
  std::string dtype;  // "bf16" or "f32"
};
// The fastest of `repeats` square GEMMs (ops::matmul_forward, inputs in `dtype`,
// out in the same) on `device`: 8192 on CUDA devices, 1024 on CPU devices.
GemmPeak gemm_peak_measure(Device device, DType dtype, int repeats = 10);

// "MFU 41.2 % (312 TFLOP/s of a measured bf16 GEMM peak of 757 TFLOP/s, 8192x8192x8192)".
std::string mfu_line(double tokens_per_s, double flops_per_token, const GemmPeak& peak);

// --mfu: for the best row of each precision among `ran`, the GEMM peak of the
// first device in that precision, measured now, times the distinct devices the
// rows used (two replicas on one GPU share its peak); one line each to stdout
// (wrapped to `width` columns, 0: not), and the JSON array `fanout bench --json`
// keeps under "mfu".
nlohmann::json bench_mfu_report(const BenchSetup& setup,
                                const std::vector<presentation::BenchResult>& ran,
                                const std::vector<std::string>& precisions, size_t width = 0);

// "GEMM 30.1 ms (58.8 %), attention ..., other and launch gaps 5.0 ms (9.8 %)":
// r.kernels over r.kernels_step_s; the rest of the step is copies, fills,
// communication and the time between launches.
std::string bench_kernels_line(const presentation::BenchResult& r);
// "matmul_backward 9.10 ms (73x), rmsnorm_backward 2.31 ms (25x), ...": the `top`
// ops that took longest in r.kernels, with how often each ran in the step.
std::string bench_ops_line(const presentation::BenchResult& r, size_t top = 10);
nlohmann::json bench_kernels_json(const presentation::BenchResult& r);

// --kernels: one profiled dp step on the first device in each precision (after
// one warm-up step); one line each to stdout (a failure too, without stopping;
// wrapped to `width` columns, 0: not), and the JSON array kept under "kernels".
nlohmann::json bench_kernels_report(const BenchSetup& setup,
                                    const std::vector<std::string>& precisions, size_t width = 0);

}  // namespace fanout::bench
