#include "apps/presentation/bench_mfu.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "ops/matmul.h"

namespace fanout::presentation {

double model_flops_per_token(const models::LlamaConfig& c, int64_t T) {
  const double C = c.hidden_size, I = c.intermediate_size, L = c.num_hidden_layers;
  const double H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
  const double per_layer = C * H * D * 2 + C * KV * D * 2 + 3 * C * I;  // q, o; k, v; mlp
  const double gemm_params = L * per_layer + static_cast<double>(c.vocab_size) * C;
  const double attention = 6.0 * L * H * D * static_cast<double>(T);
  return 6.0 * gemm_params + attention;
}

GemmPeak gemm_peak_measure(Device device, DType dtype, int repeats) {
  FANOUT_CHECK(dtype == DType::f32 || dtype == DType::bf16,
               "the GEMM peak is measured in f32 or "
               "bf16, not ",
               dtype_name(dtype));
  FANOUT_CHECK(repeats >= 1, "the GEMM peak needs at least one repeat, got ", repeats);
  const int64_t n = device.is_cuda() ? 8192 : 1024;
  Stream s(device, device.str() + " gemm peak");
  auto make = [&](float value) {
    if (dtype == DType::bf16)
      return tensor_from_vector(s, std::vector<uint16_t>(n * n, float_to_bf16(value)), {n * n},
                                DType::bf16, device);
    Tensor t = Tensor::empty({n * n}, DType::f32, device);
    flat_fill(s, t, value);
    return t;
  };
  Tensor a = make(0.01f), w = make(0.02f), out = make(0.0f);
  ops::matmul_forward(s, out, a, w, n, n, n);  // warm-up: plans, workspaces, clocks
  s.synchronize();
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    ops::matmul_forward(s, out, a, w, n, n, n);
    s.synchronize();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (secs > 0) best = std::max(best, 2.0 * n * n * n / secs);
  }
  return {best, n, n, n, dtype == DType::bf16 ? "bf16" : "f32"};
}

std::string mfu_line(double tokens_per_s, double flops_per_token, const GemmPeak& peak) {
  char buf[256];
  if (peak.flops_per_s <= 0) {
    std::snprintf(buf, sizeof buf, "MFU: no GEMM peak was measured");
    return buf;
  }
  const double achieved = tokens_per_s * flops_per_token;
  std::snprintf(buf, sizeof buf,
                "MFU %.1f %% (%.4g TFLOP/s of a measured %s GEMM peak of %.4g TFLOP/s, "
                "%lldx%lldx%lld)",
                100.0 * achieved / peak.flops_per_s, achieved / 1e12, peak.dtype.c_str(),
                peak.flops_per_s / 1e12, static_cast<long long>(peak.M),
                static_cast<long long>(peak.N), static_cast<long long>(peak.K));
  return buf;
}

}  // namespace fanout::presentation
