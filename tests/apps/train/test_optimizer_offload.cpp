// --offload optimizer (Note [Optimizer offload], apps/train/optimizer.cpp): the
// same bits as AdamW on the devices under dp and zero1-3 on 2 and 3 CPU devices,
// in fp32 and bf16, with shards in one chunk or many, in one process or across
// processes (ranks as threads); the state in host memory and none of it on the
// devices; a checkpoint's state resumed across offload on and off; a pipeline
// refused.

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "apps/train/training.h"
#include "engine/core/allocator.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/train/offload_util.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using namespace fanout::test::offload;
using fanout::test::error_of;
using fanout::test::has;
using parallel::Strategy;
namespace rdzv = fanout::test::rdzv;

TEST_CASE("offloaded AdamW gives the bits of AdamW on the devices (dp, zero1-3, fp32 and bf16)") {
  const Batch batch;
  for (DType working : {DType::f32, DType::bf16}) {
    for (Strategy strategy : kStrategies) {
      for (int n : {2, 3}) {
        CAPTURE(std::string(dtype_name(working)));
        CAPTURE(std::string(strategy_name(strategy)));
        CAPTURE(n);
        auto ref = make_training({strategy, n, working, false});
        auto off = make_training({strategy, n, working, true});
        CHECK(off->optimizer().offloaded());
        // (Not params_to_host: under zero1/zero2 in bf16 it would gather replicas'
        // masters that the first forward has yet to bring up to date.)
        const std::vector<float> init = models::LlamaModel::random_params(tiny_config(), kSeed);
        for (int64_t step = 1; step <= 3; ++step) {
          CAPTURE(step);
          const double norm_ref = train_step(*ref, batch, step);
          const double norm_off = train_step(*off, batch, step);
          CHECK(norm_ref > 0);
          CHECK(norm_off == norm_ref);
          const std::vector<float> p = ref->params_to_host();
          CHECK_FALSE(same_bits(p, init));  // the step moved the weights
          CHECK(same_bits(off->params_to_host(), p));
        }
        const State s_ref = state_of(ref->optimizer()), s_off = state_of(off->optimizer());
        CHECK(same_bits(s_off.m, s_ref.m));
        CHECK(same_bits(s_off.v, s_ref.v));
        CHECK_FALSE(same_bits(s_ref.v, std::vector<float>(s_ref.v.size(), 0.0f)));
      }
    }
  }
}

TEST_CASE("offloaded AdamW across processes gives the same weights and gathered state") {
  const Batch batch;
  const int W = 2;
  rdzv::Job job(W, W);
  std::vector<std::unique_ptr<distributed::ProcessGroup>> groups = rdzv::gloo_groups(job, 30);
  for (Strategy strategy : kStrategies) {
    CAPTURE(std::string(strategy_name(strategy)));
    struct Result {
      double norm = 0;
      std::vector<float> params;
      State state;
    };
    std::vector<Result> res(2 * W);  // [offload * W + rank]
    for (bool offload : {false, true}) {
      rdzv::on_every_rank(W, [&](int r) {
        train::TrainingOptions o = options_for({strategy, 1, DType::f32, offload});
        o.devices = {cpu_device(r)};
        o.group = groups[r].get();
        train::InitialWeights w;
        w.seed = kSeed;
        train::Training t(o, w);
        Result& out = res[offload * W + r];
        for (int64_t step = 1; step <= 2; ++step) out.norm = train_step(t, batch, step);
        out.params = t.params_to_host();
        out.state = state_of(t.optimizer());  // sharded: every rank takes part
      });
    }
    for (int r = 0; r < W; ++r) {
      CAPTURE(r);
      const Result &ref = res[r], &off = res[W + r];
      CHECK(ref.norm > 0);
      CHECK(off.norm == ref.norm);
      CHECK(same_bits(off.params, ref.params));
      CHECK(same_bits(off.state.m, ref.state.m));
      CHECK(same_bits(off.state.v, ref.state.v));
      CHECK(same_bits(off.state.v, res[W].state.v));  // every rank has it whole
    }
  }
}

TEST_CASE("an offloaded shard updated in many chunks gives the same bits") {
  const Batch batch;
  for (DType working : {DType::f32, DType::bf16}) {
    for (Strategy strategy : kStrategies) {
      CAPTURE(std::string(dtype_name(working)));
      CAPTURE(std::string(strategy_name(strategy)));
      auto ref = make_training({strategy, 3, working, false});
      // The same engine under an offloaded optimizer of 777-element chunks (the
      // shards hold a few hundred to 23k elements: one chunk, or many with a short last).
      auto eng = make_training({strategy, 3, working, false});
      train::Optimizer off(eng->engine(), train::decay_runs(eng->layout()), eng->options().adam,
                           train::OptimizerOffload{true, 777});
      for (int64_t step = 1; step <= 2; ++step) {
        CAPTURE(step);
        const double norm_ref = train_step(*ref, batch, step);
        gradients(*eng, batch);
        CHECK(off.step(step, 1e-2f, 1.0) == norm_ref);
        CHECK(same_bits(eng->params_to_host(), ref->params_to_host()));
      }
      const State s_ref = state_of(ref->optimizer()), s_off = state_of(off);
      CHECK(same_bits(s_off.m, s_ref.m));
      CHECK(same_bits(s_off.v, s_ref.v));
    }
  }
}

TEST_CASE("offloaded AdamW state lives in host memory, none of it on the devices") {
  const Batch batch;
  const int n = 2;
  for (Strategy strategy : kStrategies) {
    for (bool offload : {false, true}) {
      CAPTURE(std::string(strategy_name(strategy)));
      CAPTURE(offload);
      const HostLive host0 = host_live();
      std::vector<size_t> dev_opt0;
      for (int i = 0; i < n; ++i)
        dev_opt0.push_back(live(allocator_for(cpu_device(i)), MemTag::optimizer));
      {
        auto t = make_training({strategy, n, DType::f32, offload});
        const int64_t P = t->layout().total();
        const size_t state_bytes = 2 * sizeof(float) * static_cast<size_t>(P);
        // Lazy: nothing before the first step (Note [Lazy optimizer state]).
        CHECK(host_live().optimizer == host0.optimizer);
        train_step(*t, batch, 1);
        // Per device: the elements of its shards and their number (one norm
        // scratch float each).
        std::vector<size_t> elems(n, 0), shards(n, 0);
        for (const parallel::DataParallel::Shard& sh : t->engine().shards()) {
          elems[sh.replica] += static_cast<size_t>(sh.end - sh.begin);
          shards[sh.replica] += 1;
        }
        size_t on_devices = 0;
        for (int i = 0; i < n; ++i) {
          CAPTURE(i);
          const size_t got = live(allocator_for(cpu_device(i)), MemTag::optimizer) - dev_opt0[i];
          const size_t norms = sizeof(float) * shards[i];
          CHECK(got == (offload ? norms : norms + 2 * sizeof(float) * elems[i]));
          on_devices += got;
        }
        CHECK(on_devices >= (offload ? 0 : state_bytes));
        check_host_holds(host0, offload, P);
      }
      // All given back with the run.
      check_host_back(host0);
    }
  }
}

TEST_CASE("a checkpoint's AdamW state resumes with offload on or off, to the same bits") {
  const Batch batch;
  for (Strategy strategy : {Strategy::dp, Strategy::zero1, Strategy::zero3}) {
    for (bool saved_offloaded : {false, true}) {
      CAPTURE(std::string(strategy_name(strategy)));
      CAPTURE(saved_offloaded);
      // Two steps, "saved" (weights and state), then the third step as reference.
      auto first = make_training({strategy, 3, DType::bf16, saved_offloaded});
      train_step(*first, batch, 1);
      train_step(*first, batch, 2);
      const std::vector<float> saved = first->params_to_host();
      const State state = state_of(first->optimizer());
      train_step(*first, batch, 3);
      const std::vector<float> want = first->params_to_host();
      const State want_state = state_of(first->optimizer());
      for (bool offload : {false, true}) {
        CAPTURE(offload);
        auto resumed = make_training({strategy, 3, DType::bf16, offload}, saved.data());
        resumed->optimizer().state_from_host(state.m, state.v);
        const State loaded = state_of(resumed->optimizer());
        CHECK(same_bits(loaded.m, state.m));
        CHECK(same_bits(loaded.v, state.v));
        train_step(*resumed, batch, 3);
        CHECK(same_bits(resumed->params_to_host(), want));
        const State got = state_of(resumed->optimizer());
        CHECK(same_bits(got.m, want_state.m));
        CHECK(same_bits(got.v, want_state.v));
      }
      // An offloaded optimizer that has stepped takes the weights loaded after it
      // as its master along with the state.
      auto stepped = make_training({strategy, 3, DType::bf16, true});
      train_step(*stepped, batch, 1);
      stepped->engine().params_from_host(saved.data());
      stepped->optimizer().state_from_host(state.m, state.v);
      train_step(*stepped, batch, 3);
      CHECK(same_bits(stepped->params_to_host(), want));
    }
  }
}

TEST_CASE("an offloaded optimizer is refused for a pipeline, in one line") {
  Run r;
  r.offload = true;
  train::TrainingOptions o = options_for(r);
  o.stages = 2;
  o.cut = {0, 2, 4};
  const std::string msg = error_of([&] { train::Training t(o, train::InitialWeights{}); });
  CHECK(has(msg,
            "--offload optimizer works with --strategy dp, zero1, zero2 and zero3; not with --pp "
            "or --tp"));
  CHECK(msg.find('\n') == std::string::npos);
}
