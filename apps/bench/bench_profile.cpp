#include "apps/bench/bench_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <new>
#include <set>
#include <vector>

#include "apps/presentation/text_format.h"
#include "apps/presentation/text_table.h"
#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "ops/matmul.h"

namespace fanout::bench {

using presentation::strf;

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

std::string bench_kernels_line(const presentation::BenchResult& r) {
  std::string line;
  char buf[96];
  const double step = r.kernels_step_s > 0 ? r.kernels_step_s : 1;
  auto add = [&](const char* name, double secs) {
    std::snprintf(buf, sizeof buf, "%s%s %.2f ms (%.1f %%)", line.empty() ? "" : ", ", name,
                  secs * 1e3, 100.0 * secs / step);
    line += buf;
  };
  for (int c = 0; c < kNumOpClasses; ++c)
    add(op_class_name(static_cast<OpClass>(c)), r.kernels.seconds[c]);
  add("other and launch gaps", std::max(0.0, r.kernels_step_s - r.kernels.total()));
  return line;
}

std::string bench_ops_line(const presentation::BenchResult& r, size_t top) {
  std::string line;
  char buf[160];
  for (size_t i = 0; i < r.kernels.by_op.size() && i < top; ++i) {
    const OpTime& o = r.kernels.by_op[i];
    std::snprintf(buf, sizeof buf, "%s%s %.2f ms (%lldx)", line.empty() ? "" : ", ", o.name.c_str(),
                  o.seconds * 1e3, static_cast<long long>(o.count));
    line += buf;
  }
  return line.empty() ? "none timed" : line;
}

nlohmann::json bench_kernels_json(const presentation::BenchResult& r) {
  nlohmann::json j = {{"step_s", r.kernels_step_s}, {"ops", r.kernels.ops}};
  for (int c = 0; c < kNumOpClasses; ++c)
    j[op_class_name(static_cast<OpClass>(c))] = r.kernels.seconds[c];
  j["other and launch gaps"] = std::max(0.0, r.kernels_step_s - r.kernels.total());
  nlohmann::json by_op = nlohmann::json::array();
  for (const OpTime& o : r.kernels.by_op)
    by_op.push_back({{"op", o.name},
                     {"class", op_class_name(o.cls)},
                     {"seconds", o.seconds},
                     {"count", o.count}});
  j["by_op"] = by_op;
  return j;
}

nlohmann::json bench_mfu_report(const BenchSetup& setup,
                                const std::vector<presentation::BenchResult>& ran,
                                const std::vector<std::string>& precisions, size_t width) {
  std::set<std::string> distinct;
  for (const Device& d : setup.devices) distinct.insert(d.str());
  const double per_token = model_flops_per_token(setup.config, setup.seq_len);
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& precision : precisions) {
    const presentation::BenchResult* best = nullptr;
    for (const presentation::BenchResult& r : ran)
      if (r.precision == precision && (!best || r.tokens_per_s > best->tokens_per_s)) best = &r;
    if (!best) continue;
    GemmPeak peak =
        gemm_peak_measure(setup.devices[0], precision == "bf16" ? DType::bf16 : DType::f32);
    peak.flops_per_s *= static_cast<double>(distinct.size());
    std::fputs(presentation::text_wrap(
                   strf("fanout %s best (%s): %s", precision.c_str(), best->mode.c_str(),
                        mfu_line(best->tokens_per_s, per_token, peak).c_str()),
                   width, "  ")
                   .c_str(),
               stdout);
    const double mfu = peak.flops_per_s > 0 ? best->tokens_per_s * per_token / peak.flops_per_s : 0;
    out.push_back({{"precision", precision},
                   {"mode", best->mode},
                   {"flops_per_token", per_token},
                   {"gemm_peak_flops_per_s", peak.flops_per_s},
                   {"gemm_shape", {peak.M, peak.N, peak.K}},
                   {"mfu", mfu}});
  }
  return out;
}

nlohmann::json bench_kernels_report(const BenchSetup& setup,
                                    const std::vector<std::string>& precisions, size_t width) {
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& precision : precisions) {
    BenchSetup k = setup;
    k.devices = {setup.devices[0]};
    k.working = precision == "bf16" ? DType::bf16 : DType::f32;
    k.steps = 1, k.warmup = 1, k.min_seconds = 0, k.profile_kernels = true;
    presentation::BenchResult r;
    try {
      r = bench_mode(k, bench_modes_parse("dp")[0]);
    } catch (const std::bad_alloc&) {
      r.failed = "out of memory (a size asked for more than the machine has)";
    } catch (const std::exception& e) {
      r.failed = e.what();
    }
    auto say = [&](const std::string& line) {
      std::fputs(presentation::text_wrap(line, width, "  ").c_str(), stdout);
    };
    if (!r.failed.empty()) {
      say(strf("kernel classes, 1 device %s: failed: %s", precision.c_str(), r.failed.c_str()));
      out.push_back({{"precision", precision}, {"status", "failed"}, {"reason", r.failed}});
      continue;
    }
    say(strf("kernel classes, 1 device %s, one step %.2f ms: %s", precision.c_str(),
             r.kernels_step_s * 1e3, bench_kernels_line(r).c_str()));
    say(strf("kernel ops, 1 device %s, the longest: %s", precision.c_str(),
             bench_ops_line(r).c_str()));
    nlohmann::json j = bench_kernels_json(r);
    j["precision"] = precision, j["status"] = "ok";
    out.push_back(j);
  }
  return out;
}

}  // namespace fanout::bench
