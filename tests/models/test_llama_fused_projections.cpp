// Note [Fused projections]: q/k/v as one GEMM and gate/up as one give the values
// of the separate GEMMs, on one device and through every path that runs the
// projections (the split backward of zb1, --recompute, tensor-parallel shards,
// sequence parallelism); and the fused path is the one that ran (one GEMM fewer
// per group, forward and backward, in an op profile).

#include <doctest/doctest.h>

#include <map>
#include <string>

#include "engine/core/op_profile.h"
#include "models/llama_model.h"
#include "tests/engine/parallel/parallel_test_util.h"
#include "tests/models/llama_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

TestBatch test_batch() {
  return make_batch(4, 8, 61, 21, {0, 3, 7, 1});
}

RunResult one_device(bool fused, DType working, const models::LlamaConfig& config) {
  FusedProjectionsDefault guard(fused);
  parallel::DataParallelOptions o;
  o.device_ids = {cpu_device(0)};
  return run_data_parallel(o, test_batch(), 3, 7, working, &config, false);
}

RunResult pipeline(bool fused, DType working, const models::LlamaConfig& config,
                   const PipelineSetup& setup) {
  FusedProjectionsDefault guard(fused);
  return run_pipeline(setup, test_batch(), 3, 7, working, &config);
}

// fp32: the same products, summed in another order where a GEMM's blocking
// depends on its width; bf16 as the data-parallel bf16 tests state it.
void check_same(const RunResult& fused, const RunResult& separate, const models::LlamaConfig& c,
                DType working) {
  if (working == DType::f32)
    check_runs_close(fused, separate, c, 1e-5, 1e-5, 1e-3);
  else
    check_runs_close(fused, separate, c, 1e-4, 1e-3, 1e-2);
}

models::LlamaConfig config_of(bool tied) {
  models::LlamaConfig c = small_test_config();
  c.num_hidden_layers = 2;
  c.tie_word_embeddings = tied;
  return c;
}

}  // namespace

TEST_CASE("fused projections: one device, fp32 and bf16, tied or not, equal the separate GEMMs") {
  for (DType working : {DType::f32, DType::bf16})
    for (bool tied : {false, true}) {
      CAPTURE(dtype_name(working));
      CAPTURE(tied);
      const models::LlamaConfig c = config_of(tied);
      const RunResult separate = one_device(false, working, c);
      REQUIRE(separate.losses[2] < separate.losses[0]);
      check_same(one_device(true, working, c), separate, c, working);
    }
}

TEST_CASE("fused projections: zb1's split backward, recompute and tensor shards equal separate") {
  const models::LlamaConfig c = config_of(false);
  std::vector<PipelineSetup> setups(4);
  setups[0].schedule = parallel::PipeSchedule::zb1;  // backward_weight reads dqkv and dgu
  setups[1].recompute = true, setups[1].micro_batches = 3;
  setups[2].stages = 1, setups[2].tensor = 2;  // shards: each rank's heads and units
  setups[3].stages = 1, setups[3].tensor = 2, setups[3].sequence = true;
  for (DType working : {DType::f32, DType::bf16})
    for (size_t i = 0; i < setups.size(); ++i) {
      CAPTURE(dtype_name(working));
      CAPTURE(i);
      check_same(pipeline(true, working, c, setups[i]), pipeline(false, working, c, setups[i]), c,
                 working);
    }
}

TEST_CASE("fused projections: one GEMM for q/k/v and one for gate/up, forward and backward") {
  const models::LlamaConfig c = config_of(false);
  auto gemms = [&](bool fused) {
    FusedProjectionsDefault guard(fused);
    op_profile_start();
    one_device(fused, DType::f32, c);
    const OpTimes t = op_profile_stop();
    std::map<std::string, int64_t> count;
    for (const OpTime& op : t.by_op) count[op.name] = op.count;
    return count;
  };
  std::map<std::string, int64_t> fused = gemms(true), separate = gemms(false);
  // Per layer and step: forward 3 + 2 GEMMs become 1 + 1; backward's input and
  // weight gradients (one call each) likewise.
  const int64_t saved = 3 * c.num_hidden_layers * 3;  // steps x layers x (2 + 1) calls
  CHECK(separate["matmul_forward"] - fused["matmul_forward"] == saved);
  CHECK(separate["matmul_backward"] - fused["matmul_backward"] == saved);
  CHECK(fused["swiglu_forward"] == separate["swiglu_forward"]);
}
