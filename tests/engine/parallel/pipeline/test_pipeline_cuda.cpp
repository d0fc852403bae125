// GPU: the pipeline invariant on one GPU -- 2 and 3 stages on "cuda:0,cuda:0"
// (and cuda:0 x 3) against one cuda:0 on the whole batch, every schedule, tied
// or not, fp32 and bf16 (the CUDA bf16 path: cuBLASLt, the attention the build
// picks, the fused classifier); --recompute bit-identical on the GPU too; 2
// stages x 2 replicas under zero1 and zero2 (gradient shards, CUDA frees).

#include <doctest/doctest.h>

#include <cmath>

#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::PipeSchedule;

namespace {

const TestBatch& cuda_batch() {
  static const TestBatch batch = make_batch(8, 8, 61, 21, {0, 3, 7, 1, 0, 5, 2, 8});
  return batch;
}

// Three layers (no K in 2..4 divides them), tied or not.
models::LlamaConfig cuda_config(bool tied) {
  models::LlamaConfig config = small_test_config();
  config.num_hidden_layers = 3;
  config.tie_word_embeddings = tied;
  return config;
}

RunResult one_cuda(const models::LlamaConfig& config, DType working) {
  parallel::DataParallelOptions one;
  one.device_ids = {cuda_device(0)};
  return run_data_parallel(one, cuda_batch(), 3, 7, working, &config);
}

void check_close(const RunResult& got, const RunResult& ref, const models::LlamaConfig& config,
                 DType working) {
  if (working == DType::f32)
    check_runs_close(got, ref, config, 1e-5, 1e-5, 1e-3);
  else
    check_runs_close(got, ref, config, 1e-4, 1e-3, 1e-2);
}

}  // namespace

TEST_CASE("pipeline on cuda:0 x K equals one cuda:0 on the whole batch") {
  const TestBatch& batch = cuda_batch();
  for (DType working : {DType::f32, DType::bf16}) {
    for (bool tied : {false, true}) {
      const models::LlamaConfig config = cuda_config(tied);
      const RunResult ref = one_cuda(config, working);
      REQUIRE(ref.losses[2] < ref.losses[0]);
      for (const char* devices : {"cuda:0,cuda:0", "cuda:0,cuda:0,cuda:0"}) {
        for (PipeSchedule sched :
             {PipeSchedule::gpipe, PipeSchedule::one_f_one_b, PipeSchedule::zb1}) {
          CAPTURE(dtype_name(working));
          CAPTURE(tied);
          CAPTURE(devices);
          CAPTURE(parallel::pipe_schedule_name(sched));
          PipelineSetup setup;
          setup.devices = devices;
          setup.stages = std::string(devices).size() > 14 ? 3 : 2;
          setup.micro_batches = 4, setup.schedule = sched;
          RunResult got = run_pipeline(setup, batch, 3, 7, working, &config);
          check_close(got, ref, config, working);
          setup.recompute = true;
          RunResult again = run_pipeline(setup, batch, 3, 7, working, &config);
          CHECK(again.losses == got.losses);
          CHECK(again.final_params == got.final_params);
        }
      }
    }
  }
}

TEST_CASE("pipeline on cuda:0: 2 stages x 2 replicas under zero1 and zero2 equal one cuda:0") {
  for (DType working : {DType::f32, DType::bf16}) {
    for (bool tied : {false, true}) {
      const models::LlamaConfig config = cuda_config(tied);
      const RunResult ref = one_cuda(config, working);
      for (parallel::Strategy strategy : {parallel::Strategy::zero1, parallel::Strategy::zero2}) {
        CAPTURE(dtype_name(working));
        CAPTURE(tied);
        CAPTURE(parallel::strategy_name(strategy));
        PipelineSetup setup;
        setup.devices = "cuda:0,cuda:0,cuda:0,cuda:0";
        setup.stages = 2, setup.replicas = 2, setup.micro_batches = 2;
        setup.strategy = strategy;
        check_close(run_pipeline(setup, cuda_batch(), 3, 7, working, &config), ref, config,
                    working);
      }
    }
  }
}
