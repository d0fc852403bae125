#pragma once
// Model FLOPs utilisation for `fanout bench`: the FLOPs one training token costs
// (6N for the GEMMs plus the causal attention's products) and the device's bf16
// (or fp32) GEMM peak measured in the same run, so that MFU = tokens/s x FLOPs per
// token / measured peak needs no datasheet figure.

#include <string>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "models/llama_config.h"

namespace fanout::presentation {

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

}  // namespace fanout::presentation
