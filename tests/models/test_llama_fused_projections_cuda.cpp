// GPU: Note [Fused projections] on cuda:0: q/k/v and gate/up as one GEMM each
// give the separate GEMMs' values, in fp32 and bf16 (cuBLASLt, the strided RoPE
// and SwiGLU kernels, the v copy), through zb1's split backward on cuda:0 x 2, and
// the fused CPU model's values.

#include <doctest/doctest.h>

#include "models/llama_model.h"
#include "tests/engine/parallel/parallel_test_util.h"
#include "tests/models/llama_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

const TestBatch kBatch = make_batch(4, 8, 61, 21, {0, 3, 7, 1});

RunResult one_device(Device d, bool fused, DType working) {
  FusedProjectionsDefault guard(fused);
  parallel::DataParallelOptions o;
  o.device_ids = {d};
  return run_data_parallel(o, kBatch, 3, 7, working, nullptr, false);
}

RunResult zb1(bool fused, DType working) {
  FusedProjectionsDefault guard(fused);
  PipelineSetup setup;
  setup.schedule = parallel::PipeSchedule::zb1;
  setup.devices = "cuda:0,cuda:0";
  return run_pipeline(setup, kBatch, 3, 7, working);
}

}  // namespace

TEST_CASE("fused projections on cuda:0 equal the separate GEMMs, fp32 and bf16, and zb1") {
  const models::LlamaConfig c = small_test_config();
  const RunResult f32 = one_device(cuda_device(0), false, DType::f32);
  REQUIRE(f32.losses[2] < f32.losses[0]);
  check_runs_close(one_device(cuda_device(0), true, DType::f32), f32, c, 1e-5, 1e-5, 1e-3);
  check_runs_close(zb1(true, DType::f32), zb1(false, DType::f32), c, 1e-5, 1e-5, 1e-3);
  // bf16: other GEMM widths may sum in another order, and a last-bit flip before a
  // bf16 store moves a value by 2^-8 (the GPU bf16 invariant's tolerances).
  const RunResult bf16 = one_device(cuda_device(0), false, DType::bf16);
  check_runs_close(one_device(cuda_device(0), true, DType::bf16), bf16, c, 1e-4, 1e-2, 2e-2);
  check_runs_close(zb1(true, DType::bf16), zb1(false, DType::bf16), c, 1e-4, 1e-2, 2e-2);
}

TEST_CASE("fused projections on cuda:0 equal them on cpu:0 in fp32") {
  check_runs_close(one_device(cuda_device(0), true, DType::f32),
                   one_device(cpu_device(0), true, DType::f32), small_test_config(), 1e-5, 1e-4,
                   1e-3);
}
