// zero2 within pipeline stages: each replica of a stage keeps a shard of every
// unit's gradient and never the stage's gradients whole; what it refuses; timing
// and a failing replica change nothing. (The invariant against one device, every
// dtype, tied or not: test_pipeline.cpp.)

#include <doctest/doctest.h>

#include <atomic>

#include "apps/train/optimizer.h"
#include "engine/core/check.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::PipeSchedule;
using parallel::Strategy;

namespace {

models::LlamaConfig zero2_config(bool tied, int64_t layers = 3) {
  models::LlamaConfig c = small_test_config();
  c.num_hidden_layers = layers;
  c.tie_word_embeddings = tied;
  return c;
}

TestBatch zero2_batch() {
  return make_batch(12, 8, 61, 33, {0, 3, 7, 1, 0, 5, 2, 8, 4, 6, 1, 2});
}

struct StepResult {
  double loss = 0;
  std::vector<float> grads, params;
};

StepResult one_step(parallel::Pipeline& pipe, const TestBatch& batch, size_t P) {
  StepResult out;
  pipe.zero_grad();
  auto st = pipe.forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
  pipe.reduce_gradients();
  out.loss = st.loss_sum;
  out.grads.assign(P, 0.0f);
  pipe.grads_to_host(out.grads.data());
  return out;
}

}  // namespace

TEST_CASE("pipeline zero2: 3 stages x 2 replicas equal one device, and zero1 closely") {
  const TestBatch batch = zero2_batch();
  for (DType working : {DType::f32, DType::bf16}) {
    for (bool tied : {false, true}) {
      for (int M : {1, 3}) {
        CAPTURE(dtype_name(working));
        CAPTURE(tied);
        CAPTURE(M);
        const models::LlamaConfig config = zero2_config(tied);
        parallel::DataParallelOptions o;
        o.device_ids = {cpu_device(0)};
        const RunResult ref = run_data_parallel(o, batch, 3, 7, working, &config, false);
        PipelineSetup setup;
        setup.stages = 3, setup.replicas = 2, setup.micro_batches = M;
        setup.strategy = Strategy::zero2;
        const RunResult got = run_pipeline(setup, batch, 3, 7, working, &config);
        if (working == DType::f32)
          check_runs_close(got, ref, config, 1e-5, 1e-5, 1e-3);
        else
          check_runs_close(got, ref, config, 1e-4, 1e-3, 1e-2);
        setup.strategy = Strategy::zero1;
        check_runs_close(got, run_pipeline(setup, batch, 3, 7, working, &config), config, 1e-5,
                         working == DType::f32 ? 1e-5 : 1e-3, 1e-3);
        // --grad-comm bf16: each replica's contribution rounded before it is sent
        // (relative error <= 2^-9 each), as in test_data_parallel_bf16.cpp; after two
        // AdamW steps at lr 1e-2 the grad norms differ by up to 1 %.
        setup.strategy = Strategy::zero2, setup.grad_comm = DType::bf16;
        const RunResult rounded = run_pipeline(setup, batch, 3, 7, working, &config);
        const double diff = rel_l2(rounded.first_grads, got.first_grads);
        CHECK(diff > 0);
        CHECK(diff <= 4e-3);
        check_runs_close(rounded, got, config, 1e-3, 1e-2, 5e-2);
      }
    }
  }
}

TEST_CASE("pipeline zero2: a replica keeps its piece of each unit, never its stage's gradients") {
  // Twelve layers over 2 stages: six layers a stage, so that sharding over 3
  // replicas pays even with two units in flight.
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    const models::LlamaConfig c = zero2_config(tied, 12);
    const models::LlamaLayout layout(c);
    const TestBatch batch = zero2_batch();
    int64_t largest = c.vocab_size * c.hidden_size + c.hidden_size;  // the head or the embedding
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      largest = std::max(largest, layout.layer(l).end - layout.layer(l).begin);
    auto measure = [&](const std::string& devices, Strategy strategy,
                       std::vector<parallel::ParamUnit>* ranges) {
      PipelineSetup setup;
      setup.stages = 2, setup.replicas = 3, setup.strategy = strategy, setup.devices = devices;
      auto pipe = make_pipeline(setup, c);
      auto init = models::LlamaModel::random_params(c, 7);
      pipe->params_from_host(init.data());
      train::Optimizer opt(*pipe, train::decay_runs(layout), ops::AdamWConfig{});
      for (int s = 0; s < 2; ++s)
        for (int d = 0; d < 3; ++d) allocator_for(pipe->stage(s, d).device()).reset_peak();
      one_step(*pipe, batch, init.size());
      opt.step(1, 1e-3f, 1.0);
      if (ranges) {
        *ranges = pipe->shards();
        for (size_t i = 0; i < ranges->size(); ++i) {
          const int s = (*ranges)[i].begin < pipe->stage(1).stage_range().begin ? 0 : 1;
          bool on_a_replica = false;
          for (int d = 0; d < 3; ++d)
            on_a_replica |= pipe->shard_device(static_cast<int>(i)) == pipe->stage(s, d).device();
          CHECK(on_a_replica);
        }
      }
      std::vector<std::pair<AllocatorStats, int64_t>> out;  // per (stage, replica): stats, size
      for (int s = 0; s < 2; ++s) {
        const parallel::ParamUnit r = pipe->stage(s).stage_range();
        for (int d = 0; d < 3; ++d) out.push_back({pipe->memory(s, d), r.end - r.begin});
      }
      return out;
    };
    std::vector<parallel::ParamUnit> ranges;
    auto zero1 = measure("cpu:80,cpu:81,cpu:82,cpu:83,cpu:84,cpu:85", Strategy::zero1, nullptr);
    auto zero2 = measure("cpu:86,cpu:87,cpu:88,cpu:89,cpu:90,cpu:91", Strategy::zero2, &ranges);
    // The shards tile the whole layout in ascending order.
    int64_t at = 0;
    for (const parallel::ParamUnit& r : ranges) {
      CHECK(r.begin == at);
      at = r.end;
    }
    CHECK(at == layout.total());
    // Tied: the last stage's lm_head keeps its gradient whole over the step, and
    // the first stage takes a copy of it for the update (zero1 keeps that copy).
    const size_t tied_head = tied ? static_cast<size_t>(c.vocab_size * c.hidden_size) * 4 : 0;
    for (size_t i = 0; i < zero2.size(); ++i) {
      CAPTURE(i);
      const size_t stage = static_cast<size_t>(zero2[i].second) * 4;
      const size_t kept = i >= 3 ? tied_head : 0;  // stage 1 is the last
      CHECK(zero1[i].first.tag(MemTag::grads).live == stage + tied_head);
      // A piece of each unit, rounded up; during backward two units besides.
      const size_t shard = stage / 3 + 4 * 8;
      CHECK(zero2[i].first.tag(MemTag::grads).live <= shard + kept);
      CHECK(zero2[i].first.tag(MemTag::grads).peak <=
            shard + tied_head + 2 * static_cast<size_t>(largest) * 4);
      CHECK(zero2[i].first.tag(MemTag::grads).peak < stage * 3 / 4 + tied_head);
      CHECK(zero2[i].first.tag(MemTag::params).live == zero1[i].first.tag(MemTag::params).live);
    }
  }
}

TEST_CASE("pipeline zero2: refused in one line with zb1, with --tp, and zero3 everywhere") {
  const models::LlamaConfig config = zero2_config(false);
  PipelineSetup setup;
  setup.stages = 2, setup.replicas = 2, setup.strategy = Strategy::zero2;
  setup.schedule = PipeSchedule::zb1;
  CHECK_THROWS_WITH_AS(make_pipeline(setup, config),
                       "--pp-schedule zb1 computes the weight gradients apart from backward, "
                       "while --strategy zero2 reduces each unit's gradient as backward makes it: "
                       "use --pp-schedule 1f1b or gpipe, or --strategy zero1",
                       Error);
  setup.schedule = PipeSchedule::one_f_one_b, setup.replicas = 1, setup.tensor = 2;
  CHECK_THROWS_WITH_AS(make_pipeline(setup, config),
                       doctest::Contains("--pp 2 with --strategy zero2: tensor-parallel ranks"),
                       Error);
  setup.tensor = 1, setup.strategy = Strategy::zero3;
  CHECK_THROWS_WITH_AS(make_pipeline(setup, config),
                       doctest::Contains("as --strategy dp, zero1 or zero2 does; it does not "
                                         "combine with --strategy zero3"),
                       Error);
}

TEST_CASE("pipeline zero2: random delays on the devices change no bit") {
  const TestBatch batch = zero2_batch();
  const models::LlamaConfig config = zero2_config(true);
  for (PipeSchedule sched : {PipeSchedule::gpipe, PipeSchedule::one_f_one_b}) {
    CAPTURE(parallel::pipe_schedule_name(sched));
    PipelineSetup setup;
    setup.stages = 2, setup.replicas = 3, setup.micro_batches = 4, setup.schedule = sched;
    setup.strategy = Strategy::zero2;
    RunResult calm = run_pipeline(setup, batch, 2, 7, DType::f32, &config);
    std::atomic<int> delayed{0};
    setup.delay_hook = random_delay_hook(11, delayed);
    RunResult shaken = run_pipeline(setup, batch, 2, 7, DType::f32, &config);
    CHECK(shaken.losses == calm.losses);
    CHECK(shaken.grad_norms == calm.grad_norms);
    CHECK(shaken.first_grads == calm.first_grads);
    CHECK(shaken.final_params == calm.final_params);
    CHECK(delayed > 0);
  }
}

TEST_CASE(
    "pipeline zero2: a replica that throws mid-backward is named, and the next step is clean") {
  const TestBatch batch = zero2_batch();
  for (bool tied : {false, true}) {
    for (int stage : {0, 1}) {
      CAPTURE(tied);
      CAPTURE(stage);
      const models::LlamaConfig config = zero2_config(tied);
      PipelineSetup setup;
      setup.stages = 2, setup.replicas = 2, setup.micro_batches = 3;
      setup.strategy = Strategy::zero2;
      setup.devices = "cpu:92,cpu:93,cpu:94,cpu:95";
      bool armed = false;
      // Replica 1 fails at its second backward, while replica 0 goes on into it.
      setup.fault_hook = [&](int s, int replica, const parallel::Action& a) {
        if (armed && s == stage && replica == 1 && a.kind == parallel::ActionKind::backward &&
            a.micro == 1)
          throw Error("injected failure");
      };
      auto pipe = make_pipeline(setup, config);
      auto init = models::LlamaModel::random_params(config, 7);
      pipe->params_from_host(init.data());
      one_step(*pipe, batch, init.size());  // what a step allocates once is there
      std::vector<size_t> before;
      for (int s = 0; s < 2; ++s)
        for (int d = 0; d < 2; ++d) before.push_back(pipe->memory(s, d).total.live);
      armed = true;
      try {
        one_step(*pipe, batch, init.size());
        FAIL("the injected failure did not surface");
      } catch (const Error& e) {
        const std::string device = stage == 0 ? "cpu:94" : "cpu:95";  // replica 1's stage
        CHECK(std::string(e.what()).find(device) != std::string::npos);
        CHECK(std::string(e.what()).find("injected failure") != std::string::npos);
      }
      armed = false;
      const StepResult after = one_step(*pipe, batch, init.size());
      std::vector<size_t> now;
      for (int s = 0; s < 2; ++s)
        for (int d = 0; d < 2; ++d) now.push_back(pipe->memory(s, d).total.live);
      CHECK(now == before);
      setup.devices = "";
      auto fresh = make_pipeline(setup, config);
      fresh->params_from_host(init.data());
      const StepResult clean = one_step(*fresh, batch, init.size());
      CHECK(after.loss == clean.loss);
      CHECK(after.grads == clean.grads);
    }
  }
}
