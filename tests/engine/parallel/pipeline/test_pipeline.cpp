// The pipeline invariant: K stages (and K stages x D replicas) on a split batch
// equal one device on the whole batch, for every schedule, tied or not, fp32
// and bf16; --recompute is bit-identical; timing does not matter; a failing
// stage is named and the next step runs as if nothing happened.

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>

#include "engine/core/check.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::PipeSchedule;

namespace {

const PipeSchedule kSchedules[] = {PipeSchedule::gpipe, PipeSchedule::one_f_one_b,
                                   PipeSchedule::zb1};

// Three layers: five units (embedding, 3 layers, head), so no K in 2..4 divides
// the layers evenly.
models::LlamaConfig pipeline_config(bool tied) {
  models::LlamaConfig c = small_test_config();
  c.num_hidden_layers = 3;
  c.tie_word_embeddings = tied;
  return c;
}

TestBatch pipeline_batch() {
  return make_batch(8, 8, 61, 21, {0, 3, 7, 1, 0, 5, 2, 8});
}

// Relative tolerances: losses and grad norms per step, each tensor's gradient
// after step 1 (rel_l2), the change of the weights over the run.
struct Tolerance {
  double loss, grad, update;
};
constexpr Tolerance kF32{1e-5, 1e-5, 1e-3};
// bf16 as the data-parallel bf16 tests state it (test_data_parallel_bf16.cpp):
// rows are computed as one device does, but f32 sums over micro-batches run in
// another order, and a last-bit flip before a bf16 store moves a value by 2^-8.
constexpr Tolerance kBf16{1e-4, 1e-3, 1e-2};

void check_close(const RunResult& got, const RunResult& ref, const models::LlamaConfig& config,
                 Tolerance tol) {
  check_runs_close(got, ref, config, tol.loss, tol.grad, tol.update);
}

RunResult one_device(const TestBatch& batch, const models::LlamaConfig& config, DType working) {
  parallel::DataParallelOptions o;
  o.device_ids = {cpu_device(0)};
  return run_data_parallel(o, batch, 3, 7, working, &config, false);
}

void check_bitwise(const RunResult& got, const RunResult& ref) {
  CHECK(got.losses == ref.losses);
  CHECK(got.grad_norms == ref.grad_norms);
  CHECK(got.first_grads == ref.first_grads);
  CHECK(got.final_params == ref.final_params);
}

}  // namespace

TEST_CASE("pipeline: K stages, every schedule and micro-batch count, equal one device") {
  const TestBatch batch = pipeline_batch();
  for (DType working : {DType::f32, DType::bf16}) {
    for (bool tied : {false, true}) {
      const models::LlamaConfig config = pipeline_config(tied);
      const RunResult ref = one_device(batch, config, working);
      REQUIRE(ref.losses[2] < ref.losses[0]);
      for (int K : {2, 3, 4}) {
        for (int M : {1, 2, 3, 8}) {
          for (PipeSchedule sched : kSchedules) {
            CAPTURE(dtype_name(working));
            CAPTURE(tied);
            CAPTURE(K);
            CAPTURE(M);
            CAPTURE(parallel::pipe_schedule_name(sched));
            PipelineSetup setup;
            setup.stages = K, setup.micro_batches = M, setup.schedule = sched;
            RunResult got = run_pipeline(setup, batch, 3, 7, working, &config);
            check_close(got, ref, config, working == DType::f32 ? kF32 : kBf16);
          }
        }
      }
    }
  }
}

TEST_CASE("pipeline: 2 stages x 2 replicas, and 2 x 3 under zero1 and zero2, equal one device") {
  const TestBatch batch = pipeline_batch();
  for (DType working : {DType::f32, DType::bf16}) {
    for (bool tied : {false, true}) {
      const models::LlamaConfig config = pipeline_config(tied);
      const RunResult ref = one_device(batch, config, working);
      for (PipeSchedule sched : kSchedules) {
        for (auto [strategy, replicas] : {std::pair{parallel::Strategy::dp, 2},
                                          {parallel::Strategy::zero1, 2},
                                          {parallel::Strategy::zero1, 3},
                                          {parallel::Strategy::zero2, 2},
                                          {parallel::Strategy::zero2, 3}}) {
          if (strategy == parallel::Strategy::zero2 && sched == PipeSchedule::zb1) continue;
          for (int M : {1, 2}) {
            CAPTURE(dtype_name(working));
            CAPTURE(tied);
            CAPTURE(M);
            CAPTURE(parallel::pipe_schedule_name(sched));
            CAPTURE(parallel::strategy_name(strategy));
            CAPTURE(replicas);
            PipelineSetup setup;
            setup.stages = 2, setup.replicas = replicas, setup.micro_batches = M;
            setup.schedule = sched, setup.strategy = strategy;
            RunResult got = run_pipeline(setup, batch, 3, 7, working, &config);
            check_close(got, ref, config, working == DType::f32 ? kF32 : kBf16);
          }
        }
      }
    }
  }
}

TEST_CASE("pipeline: --overlap, each stage summed as soon as it is done, changes no bit") {
  const TestBatch batch = pipeline_batch();
  for (parallel::Strategy strategy :
       {parallel::Strategy::dp, parallel::Strategy::zero1, parallel::Strategy::zero2}) {
    for (bool tied : {false, true}) {
      for (PipeSchedule sched : kSchedules) {
        if (strategy == parallel::Strategy::zero2 && sched == PipeSchedule::zb1) continue;
        CAPTURE(parallel::strategy_name(strategy));
        CAPTURE(tied);
        CAPTURE(parallel::pipe_schedule_name(sched));
        const models::LlamaConfig config = pipeline_config(tied);
        PipelineSetup setup;
        setup.stages = 3, setup.replicas = 2, setup.micro_batches = 2;
        setup.schedule = sched, setup.strategy = strategy;
        RunResult after = run_pipeline(setup, batch, 3, 7, DType::f32, &config);
        setup.overlap = true;
        check_bitwise(run_pipeline(setup, batch, 3, 7, DType::f32, &config), after);
      }
    }
  }
}

TEST_CASE("pipeline: zero1 gives each replica its part of every stage to update") {
  const models::LlamaConfig config = pipeline_config(false);
  PipelineSetup setup;
  setup.stages = 2, setup.replicas = 3, setup.strategy = parallel::Strategy::zero1;
  auto pipe = make_pipeline(setup, config);
  const std::vector<parallel::ParamUnit> shards = pipe->shards();
  REQUIRE(shards.size() == 6);  // stage-major: each stage's 3 parts, in replica order
  int64_t at = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    CAPTURE(i);
    CHECK(shards[i].begin == at);  // the parts tile the layout, in order
    at = shards[i].end;
    const parallel::ParamUnit stage = pipe->stage(static_cast<int>(i / 3)).stage_range();
    const int64_t n = stage.end - stage.begin;
    CHECK(shards[i].end - shards[i].begin <= (n + 2) / 3);
    CHECK(pipe->shard_device(static_cast<int>(i)) ==
          pipe->stage(static_cast<int>(i / 3), static_cast<int>(i % 3)).device());
  }
  CHECK(at == pipe->num_params());
}

TEST_CASE("pipeline: an explicit cut, with a stage of the embedding alone, equals one device") {
  const TestBatch batch = pipeline_batch();
  const models::LlamaConfig config = pipeline_config(true);
  const RunResult ref = one_device(batch, config, DType::f32);
  PipelineSetup setup;
  setup.stages = 3, setup.micro_batches = 4;
  for (std::vector<int> cut : {std::vector<int>{0, 1, 4, 5}, std::vector<int>{0, 3, 4, 5}}) {
    CAPTURE(cut[1]);
    setup.cut = cut;
    check_close(run_pipeline(setup, batch, 3, 7, DType::f32, &config), ref, config, kF32);
  }
}

TEST_CASE("pipeline: --recompute is bit-identical to keeping every activation") {
  const TestBatch batch = pipeline_batch();
  for (DType working : {DType::f32, DType::bf16}) {
    for (PipeSchedule sched : kSchedules) {
      for (int K : {1, 2, 3}) {
        CAPTURE(dtype_name(working));
        CAPTURE(parallel::pipe_schedule_name(sched));
        CAPTURE(K);
        const models::LlamaConfig config = pipeline_config(K == 2);
        PipelineSetup setup;
        setup.stages = K, setup.micro_batches = 3, setup.schedule = sched;
        RunResult plain = run_pipeline(setup, batch, 3, 7, working, &config);
        setup.recompute = true;
        check_bitwise(run_pipeline(setup, batch, 3, 7, working, &config), plain);
      }
    }
  }
}

TEST_CASE("pipeline: random delays on the devices change nothing") {
  const TestBatch batch = pipeline_batch();
  const models::LlamaConfig config = pipeline_config(true);
  for (PipeSchedule sched : kSchedules) {
    CAPTURE(parallel::pipe_schedule_name(sched));
    PipelineSetup setup;
    setup.stages = 3, setup.micro_batches = 4, setup.schedule = sched;
    RunResult calm = run_pipeline(setup, batch, 2, 7, DType::f32, &config);
    std::atomic<int> delayed{0};
    setup.delay_hook = random_delay_hook(5, delayed);
    check_bitwise(run_pipeline(setup, batch, 2, 7, DType::f32, &config), calm);
    CHECK(delayed > 0);
  }
}

TEST_CASE("pipeline: a stage that throws mid-schedule is named, and the next steps run clean") {
  const TestBatch batch = pipeline_batch();
  const models::LlamaConfig config = pipeline_config(false);
  for (PipeSchedule sched : kSchedules) {
    for (parallel::ActionKind kind : {parallel::ActionKind::forward, parallel::ActionKind::backward,
                                      parallel::ActionKind::backward_weight}) {
      if ((sched == PipeSchedule::zb1) != (kind != parallel::ActionKind::backward)) continue;
      CAPTURE(parallel::pipe_schedule_name(sched));
      CAPTURE(parallel::action_kind_letter(kind));
      PipelineSetup setup;
      setup.stages = 3, setup.micro_batches = 4, setup.schedule = sched;
      bool armed = false;
      setup.fault_hook = [&](int stage, int, const parallel::Action& a) {
        const bool hit = a.kind == kind || (kind == parallel::ActionKind::backward &&
                                            a.kind == parallel::ActionKind::backward_input);
        if (armed && stage == 1 && hit && a.micro == 1) throw Error("injected failure");
      };
      auto pipe = make_pipeline(setup, config);
      auto init = models::LlamaModel::random_params(config, 7);
      pipe->params_from_host(init.data());
      // One clean step first: what a step allocates once (activation slots,
      // boundary buffers) is there before the failure.
      pipe->zero_grad();
      pipe->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
      const size_t before = pipe->memory(1).total.live;
      armed = true;
      pipe->zero_grad();
      try {
        pipe->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
        FAIL("the injected failure did not surface");
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find("cpu:1") != std::string::npos);
        CHECK(std::string(e.what()).find("injected failure") != std::string::npos);
      }
      armed = false;
      // The failed step leaves nothing behind: a step now equals a fresh pipeline's.
      pipe->zero_grad();
      auto st = pipe->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
      pipe->reduce_gradients();
      CHECK(pipe->memory(1).total.live == before);
      std::vector<float> grads(init.size());
      pipe->grads_to_host(grads.data());
      auto fresh = make_pipeline(setup, config);
      fresh->params_from_host(init.data());
      fresh->zero_grad();
      auto st2 =
          fresh->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
      fresh->reduce_gradients();
      std::vector<float> grads2(init.size());
      fresh->grads_to_host(grads2.data());
      CHECK(st.loss_sum == st2.loss_sum);
      CHECK(grads == grads2);
    }
  }
}

TEST_CASE("pipeline: 1f1b holds fewer activations than gpipe, and zb1 no more than 1f1b") {
  const TestBatch batch = pipeline_batch();
  const models::LlamaConfig config = pipeline_config(false);
  auto activations = [&](PipeSchedule sched) {
    PipelineSetup setup;
    setup.stages = 2, setup.micro_batches = 8, setup.schedule = sched;
    setup.devices = "cpu:6,cpu:7";  // devices no other test here touches
    auto pipe = make_pipeline(setup, config);
    auto init = models::LlamaModel::random_params(config, 7);
    pipe->params_from_host(init.data());
    pipe->zero_grad();
    pipe->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
    return pipe->memory(0).tag(MemTag::activations).live;
  };
  const size_t gpipe = activations(PipeSchedule::gpipe);
  const size_t f1b = activations(PipeSchedule::one_f_one_b);
  // Stage 0 of 2: gpipe keeps all 8 micro-batches, 1f1b min(K - s, M) = 2.
  CHECK(f1b < gpipe / 2);
  CHECK(activations(PipeSchedule::zb1) <= f1b * 3 / 2);
}

TEST_CASE("pipeline: bad setups are refused in one line") {
  const models::LlamaConfig config = pipeline_config(false);
  const TestBatch batch = pipeline_batch();
  PipelineSetup setup;
  setup.stages = 2, setup.micro_batches = 9;
  auto pipe = make_pipeline(setup, config);
  CHECK_THROWS_WITH_AS(
      pipe->forward_backward(batch.host(), models::kIgnoreIndex, 1.0),
      doctest::Contains("--micro-batches 9 needs at least 9 rows per pipeline replica"), Error);
  setup.micro_batches = 2, setup.devices = "cpu:0,cpu:1,cpu:2";
  CHECK_THROWS_WITH_AS(make_pipeline(setup, config), doctest::Contains("--pp 2 does not divide"),
                       Error);
  setup.devices = "", setup.stages = 6;
  CHECK_THROWS_AS(make_pipeline(setup, config), Error);
}
