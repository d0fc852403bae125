// `fanout bench --mfu --kernels` (apps/bench/bench_profile.h): the FLOPs per
// token counted by hand for the tiny preset, a GEMM peak measured on a CPU device,
// the MFU line, and the kernel-class line of a profiled step.

#include <doctest/doctest.h>

#include <string>

#include "apps/bench/bench_profile.h"
#include "engine/core/check.h"
#include "models/llama_config.h"

using namespace fanout;
using namespace fanout::presentation;
using namespace fanout::bench;

TEST_CASE("model FLOPs per token: 6 x the GEMMs' parameters plus the causal attention's products") {
  models::LlamaConfig c = models::llama_preset("tiny");
  // tiny: C 128, I 384, L 4, H 4, KV 2, D 32, V 259. Per layer q, o 128x128 each,
  // k, v 128x64 each, gate, up, down 128x384 each; then the lm_head 259x128.
  const double gemm = 4 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 384) + 259 * 128;
  const double attention = 6.0 * 4 * 4 * 32 * 128;  // 6 L H D T at T = 128
  CHECK(model_flops_per_token(c, 128) == 6 * gemm + attention);
  // Attention grows with T, the GEMMs do not.
  CHECK(model_flops_per_token(c, 256) - model_flops_per_token(c, 128) == attention);
}

TEST_CASE("the GEMM peak is measured on the device in the dtype asked for") {
  GemmPeak p = gemm_peak_measure(cpu_device(0), DType::f32, 2);
  CHECK(p.flops_per_s > 1e8);  // any CPU does 0.1 GFLOP/s
  CHECK(p.M == 1024);
  CHECK(p.dtype == "f32");
  CHECK_THROWS_WITH_AS(gemm_peak_measure(cpu_device(0), DType::i32), doctest::Contains("not i32"),
                       Error);
  CHECK_THROWS_WITH_AS(gemm_peak_measure(cpu_device(0), DType::f32, 0),
                       doctest::Contains("at least one repeat"), Error);
}

TEST_CASE("the MFU line divides the achieved FLOPs by the measured peak") {
  GemmPeak p{1e15, 8192, 8192, 8192, "bf16"};
  const std::string line = mfu_line(1e5, 4e9, p);  // 4e14 FLOP/s of 1e15
  CHECK(line ==
        "MFU 40.0 % (400 TFLOP/s of a measured bf16 GEMM peak of 1000 TFLOP/s, "
        "8192x8192x8192)");
  CHECK(mfu_line(1e5, 4e9, GemmPeak{}) == "MFU: no GEMM peak was measured");
}

TEST_CASE("the kernel-class line: each class over the step, the rest as other and launch gaps") {
  BenchResult r;
  r.kernels_step_s = 0.010;
  r.kernels.seconds = {0.004, 0.002, 0.001, 0.0015, 0.0005};  // GEMM .. optimizer: 9 ms
  CHECK(bench_kernels_line(r) ==
        "GEMM 4.00 ms (40.0 %), attention 2.00 ms (20.0 %), loss 1.00 ms (10.0 %), element-wise "
        "1.50 ms (15.0 %), optimizer 0.50 ms (5.0 %), other and launch gaps 1.00 ms (10.0 %)");
  nlohmann::json j = bench_kernels_json(r);
  CHECK(j["GEMM"].get<double>() == 0.004);
  CHECK(j["other and launch gaps"].get<double>() == doctest::Approx(0.001));
  // Overlapping streams can sum past the wall time: the rest is never negative.
  r.kernels_step_s = 0.005;
  CHECK(bench_kernels_json(r)["other and launch gaps"].get<double>() == 0);
}

TEST_CASE("the kernel-ops line: the longest ops with their counts, and all of them in the JSON") {
  BenchResult r;
  CHECK(bench_ops_line(r) == "none timed");
  r.kernels_step_s = 0.010;
  r.kernels.by_op = {{"matmul_backward", OpClass::gemm, 0.004, 73},
                     {"rmsnorm_backward", OpClass::elementwise, 0.0015, 25},
                     {"rope_forward", OpClass::elementwise, 0.00025, 24}};
  CHECK(bench_ops_line(r) ==
        "matmul_backward 4.00 ms (73x), rmsnorm_backward 1.50 ms (25x), rope_forward 0.25 ms "
        "(24x)");
  CHECK(bench_ops_line(r, 1) == "matmul_backward 4.00 ms (73x)");
  nlohmann::json j = bench_kernels_json(r);
  REQUIRE(j["by_op"].size() == 3);
  CHECK(j["by_op"][1]["op"] == "rmsnorm_backward");
  CHECK(j["by_op"][1]["class"] == "element-wise");
  CHECK(j["by_op"][1]["count"] == 25);
}
