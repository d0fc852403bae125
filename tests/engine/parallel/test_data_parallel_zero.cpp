// zero2 and zero3 beyond the shared invariant tests (test_data_parallel.cpp runs
// them in every mode): tied embeddings, gradient accumulation, evaluation between
// steps, recovery after a failing device, and the memory each device keeps.

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>

#include "apps/train/optimizer.h"
#include "engine/core/check.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::DataParallel;
using parallel::DataParallelOptions;
using parallel::LossOn;
using parallel::Strategy;

namespace {

DataParallelOptions options(const char* devices, Strategy s, LossOn l = LossOn::replicas) {
  DataParallelOptions o;
  o.device_ids = devices_parse(devices);
  o.strategy = s;
  o.loss_on = l;
  return o;
}

std::unique_ptr<DataParallel> make_dp(DataParallelOptions o,
                                      const models::LlamaConfig& config = small_test_config(),
                                      DType working = DType::f32) {
  std::vector<Device> ids = o.device_ids;
  auto factory = [config, ids, working](Device d, int i) {
    return std::make_unique<models::LlamaModel>(config, d,
                                                parallel::replica_lane(ids, i, "compute"), working);
  };
  auto dp = std::make_unique<DataParallel>(factory, o);
  std::vector<float> init = models::LlamaModel::random_params(config, 7);
  dp->params_from_host(init.data());
  return dp;
}

std::vector<float> params_of(DataParallel& dp) {
  std::vector<float> out(dp.primary().num_params());
  dp.params_to_host(out.data());
  return out;
}

void check_same_run(const RunResult& got, const RunResult& ref) {
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(got.losses[s] - ref.losses[s]) <= 1e-5 * std::abs(ref.losses[s]));
    CHECK(std::abs(got.grad_norms[s] - ref.grad_norms[s]) <= 1e-5 * ref.grad_norms[s]);
  }
  CHECK(rel_l2(got.first_grads, ref.first_grads) <= 1e-5);
  auto du = difference(got.final_params, got.init_params);
  auto dr = difference(ref.final_params, ref.init_params);
  CHECK(rel_l2(du, dr) <= 1e-3);
  CHECK(rel_l2(dr, std::vector<float>(dr.size(), 0.0f)) > 0);
}

}  // namespace

TEST_CASE("zero2 and zero3 with tied embeddings equal one device") {
  // The lm_head's gradient lands in the embedding's unit at the start of backward
  // and the embedding's own at the end: the unit is reduced once, after both.
  models::LlamaConfig tied = small_test_config();
  tied.tie_word_embeddings = true;
  TestBatch batch = make_batch(7, 8, 61, 31, {0, 2, 5, 0, 1, 7, 3});
  RunResult ref = run_data_parallel(options("cpu:0", Strategy::dp), batch, 3, 7, DType::f32, &tied);
  for (Strategy s : {Strategy::zero2, Strategy::zero3}) {
    for (LossOn l : {LossOn::replicas, LossOn::output}) {
      for (const char* devices : {"cpu:0,cpu:1,cpu:2", "cpu:0,cpu:0"}) {
        CAPTURE(parallel::strategy_name(s));
        CAPTURE(devices);
        check_same_run(run_data_parallel(options(devices, s, l), batch, 3, 7, DType::f32, &tied),
                       ref);
      }
    }
  }
}

TEST_CASE("zero2 and zero3 accumulate micro-batches into their shards") {
  // Two micro-batches of 4 rows (the second on 3 devices leaves one idle) equal
  // one device on the same two micro-batches.
  TestBatch a = make_batch(4, 8, 61, 32, {1, 0, 3, 0});
  TestBatch b = make_batch(2, 8, 61, 33, {0, 4});
  double total = static_cast<double>(a.counted() + b.counted());
  auto run = [&](DataParallelOptions o) {
    auto dp = make_dp(o);
    models::LlamaLayout layout(small_test_config());
    train::Optimizer opt(*dp, train::decay_runs(layout), ops::AdamWConfig{});
    std::vector<double> out;
    for (int step = 1; step <= 2; ++step) {
      dp->zero_grad();
      double loss = dp->forward_backward(a.host(), models::kIgnoreIndex, total, false).loss_sum;
      loss += dp->forward_backward(b.host(), models::kIgnoreIndex, total, true).loss_sum;
      dp->reduce_gradients();
      out.push_back(loss / total);
      out.push_back(opt.step(step, 1e-2f, 1.0));
    }
    std::vector<float> p = params_of(*dp);
    out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  std::vector<double> ref = run(options("cpu:0", Strategy::dp));
  for (Strategy s : {Strategy::zero2, Strategy::zero3}) {
    CAPTURE(parallel::strategy_name(s));
    std::vector<double> got = run(options("cpu:0,cpu:1,cpu:2", s));
    REQUIRE(got.size() == ref.size());
    for (size_t i = 0; i < 4; ++i) CHECK(std::abs(got[i] - ref[i]) <= 1e-5 * std::abs(ref[i]));
    double num = 0, den = 0;
    for (size_t i = 4; i < ref.size(); ++i)
      num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    CHECK(std::sqrt(num / den) <= 1e-5);
  }
}

TEST_CASE("zero3 evaluates between steps and trains on as one device does") {
  TestBatch batch = make_batch(6, 8, 61, 34, {0, 1, 0, 2, 0, 5});
  TestBatch held = make_batch(3, 8, 61, 35);
  auto run = [&](DataParallelOptions o) {
    auto dp = make_dp(o);
    models::LlamaLayout layout(small_test_config());
    train::Optimizer opt(*dp, train::decay_runs(layout), ops::AdamWConfig{});
    std::vector<double> out;
    for (int step = 1; step <= 3; ++step) {
      dp->zero_grad();
      out.push_back(
          dp->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted()).loss_sum);
      dp->reduce_gradients();
      opt.step(step, 1e-2f, 1.0);
      parallel::LossStats e = dp->evaluate(held.host(), models::kIgnoreIndex);
      out.push_back(e.loss_sum / e.count);
    }
    return out;
  };
  std::vector<double> ref = run(options("cpu:0", Strategy::dp));
  std::vector<double> got = run(options("cpu:0,cpu:1,cpu:2,cpu:3", Strategy::zero3));
  for (size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - ref[i]) <= 1e-5 * std::abs(ref[i]));
  }
}

TEST_CASE(
    "zero2 and zero3: a device that throws mid-step is named, nothing leaks, training goes on") {
  TestBatch batch = make_batch(6, 8, 61, 36, {0, 1, 2, 0, 3, 0});
  for (Strategy s : {Strategy::zero2, Strategy::zero3}) {
    for (const char* phase : {"forward", "backward"}) {
      CAPTURE(parallel::strategy_name(s));
      CAPTURE(phase);
      // Fresh devices: the live bytes below are per device for the whole process.
      DataParallelOptions o = options("cpu:50,cpu:51,cpu:52", s);
      std::atomic<bool> fail{true};
      std::string want = phase;
      o.fault_hook = [&](int replica, const std::string& p) {
        if (fail && replica == 1 && p == want) throw Error("injected fault");
      };
      {
        auto dp = make_dp(o);
        models::LlamaLayout layout(small_test_config());
        train::Optimizer opt(*dp, train::decay_runs(layout), ops::AdamWConfig{});
        auto live = [&](int r, MemTag t) { return dp->memory(r).tag(t).live; };
        size_t grads_before = live(0, MemTag::grads), params_before = live(0, MemTag::params);
        dp->zero_grad();
        CHECK_THROWS_WITH_AS(
            dp->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted()),
            doctest::Contains("cpu:51"), Error);
        fail = false;
        dp->zero_grad();
        parallel::LossStats st =
            dp->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted());
        dp->reduce_gradients();
        opt.step(1, 1e-2f, 1.0);
        CHECK(st.count == batch.counted());
        for (Stream* st : {&dp->replica(0).compute_stream()}) st->synchronize();
        // Every unit buffer was freed: only the shards (and zero2's whole weights) stay.
        CHECK(live(0, MemTag::grads) == grads_before);
        CHECK(live(0, MemTag::params) == params_before);
        auto ref = make_dp(options("cpu:0", Strategy::dp));
        ref->zero_grad();
        parallel::LossStats rs =
            ref->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted());
        CHECK(std::abs(st.loss_sum - rs.loss_sum) <= 1e-5 * std::abs(rs.loss_sum));
      }
    }
  }
}

TEST_CASE("zero2 keeps a gradient shard per device and zero3 a weight shard too") {
  // Six layers: with two units in flight per device, sharding must pay.
  models::LlamaConfig c = small_test_config();
  c.num_hidden_layers = 6;
  TestBatch batch = make_batch(8, 16, 61, 37);
  models::LlamaLayout layout(c);
  const int64_t P = layout.total();
  int64_t largest = c.vocab_size * c.hidden_size + c.hidden_size;  // the head, or the embedding
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    largest = std::max(largest, layout.layer(l).end - layout.layer(l).begin);
  auto measure = [&](const char* devices, Strategy s) {
    auto dp = make_dp(options(devices, s), c);
    train::Optimizer opt(*dp, train::decay_runs(layout), ops::AdamWConfig{});
    for (int r = 0; r < dp->size(); ++r) allocator_for(dp->replica(r).device()).reset_peak();
    dp->zero_grad();
    dp->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted());
    dp->reduce_gradients();
    opt.step(1, 1e-3f, 1.0);
    std::vector<AllocatorStats> stats;
    for (int r = 0; r < dp->size(); ++r) stats.push_back(dp->memory(r));
    return stats;
  };
  // Every unit is split evenly: a device's piece of each unit, rounded up.
  const size_t shard = static_cast<size_t>(P / 4 + 2 * (c.num_hidden_layers + 2)) * 4;
  auto dp = measure("cpu:60,cpu:61,cpu:62,cpu:63", Strategy::dp);
  CHECK(dp[1].tag(MemTag::grads).live == static_cast<size_t>(P) * 4);
  auto zero2 = measure("cpu:64,cpu:65,cpu:66,cpu:67", Strategy::zero2);
  auto zero3 = measure("cpu:68,cpu:69,cpu:70,cpu:71", Strategy::zero3);
  const size_t in_flight = 2 * static_cast<size_t>(largest) * 4;  // two units per device
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    // Between steps: the gradient shard only; during backward two unit buffers besides.
    CHECK(zero2[r].tag(MemTag::grads).live <= shard);
    CHECK(zero2[r].tag(MemTag::grads).peak <= shard + in_flight);
    CHECK(zero2[r].tag(MemTag::grads).peak < static_cast<size_t>(P) * 4 * 3 / 4);
    CHECK(zero2[r].tag(MemTag::params).live == static_cast<size_t>(P) * 4);  // weights whole
    CHECK(zero3[r].tag(MemTag::grads).live <= shard);
    CHECK(zero3[r].tag(MemTag::params).live <= shard);  // the master shard (fp32: also working)
    CHECK(zero3[r].tag(MemTag::params).peak <= shard + in_flight);
    CHECK(zero3[r].tag(MemTag::params).peak < static_cast<size_t>(P) * 4 * 3 / 4);
    CHECK(zero3[r].tag(MemTag::optimizer).live <=
          2 * shard + 4 * static_cast<size_t>(c.num_hidden_layers + 2));
  }
}

TEST_CASE("zero3 refuses whole-weight access with one line") {
  auto dp = make_dp(options("cpu:0,cpu:1", Strategy::zero3));
  CHECK_THROWS_WITH_AS(dp->params_changed(), doctest::Contains("params_from_host"), Error);
  auto& model = dynamic_cast<models::LlamaModel&>(dp->primary());
  CHECK_THROWS_WITH_AS(model.param("model.norm.weight"), doctest::Contains("sharded"), Error);
}

TEST_CASE("the weights read back before the first step are the ones given, in every mode") {
  // New weights sit whole in the primary's master until the next forward sends
  // them out: reading them back must not gather the replicas' older shards.
  const models::LlamaConfig config = small_test_config();
  const std::vector<float> init = models::LlamaModel::random_params(config, 7);
  for (DType working : {DType::f32, DType::bf16}) {
    for (Strategy s : {Strategy::dp, Strategy::zero1, Strategy::zero2, Strategy::zero3}) {
      CAPTURE(std::string(dtype_name(working)));
      CAPTURE(std::string(parallel::strategy_name(s)));
      std::unique_ptr<DataParallel> dp = make_dp(options("cpu:0,cpu:1", s), config, working);
      CHECK(params_of(*dp) == init);
      CHECK(params_of(*dp) == init);  // and again: the read changed nothing
    }
  }
}
