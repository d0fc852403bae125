#pragma once
// Runs of the DataParallel engine over a list of steps, with step graphs on or
// off (Note [Step graphs]), for tests that compare the two: bit for bit on CPU,
// within a tolerance on a GPU.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "apps/train/optimizer.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "tests/engine/parallel/parallel_test_util.h"

namespace fanout::test {

// The loss on the replicas, `strategy` on `devices`, graphs on or off.
inline parallel::DataParallelOptions graph_options(const char* devices, parallel::Strategy strategy,
                                                   bool graphs) {
  parallel::DataParallelOptions o;
  o.device_ids = devices_parse(devices);
  o.strategy = strategy;
  o.loss_on = parallel::LossOn::replicas;
  o.graphs = graphs;
  return o;
}

struct GraphRun {
  std::vector<double> losses;  // per step that ran; NaN for one that failed
  std::vector<float> final_params;
  int64_t launches = 0;  // DataParallel::graph_launches()
};

// One AdamW step per entry of `steps` on the small test model; before step i,
// between(i, dp) may evaluate or change something. A step that throws is recorded
// as NaN and the run goes on (the engine recovers).
inline GraphRun run_graph_steps(
    parallel::DataParallelOptions options, const std::vector<const TestBatch*>& steps,
    DType working = DType::f32,
    const std::function<void(size_t, parallel::DataParallel&)>& between = nullptr) {
  models::LlamaConfig config = small_test_config();
  std::vector<Device> ids = options.device_ids;
  auto factory = [&](Device d, int i) {
    return std::make_unique<models::LlamaModel>(config, d,
                                                parallel::replica_lane(ids, i, "compute"), working);
  };
  parallel::DataParallel dp(factory, options);
  dp.params_from_host(models::LlamaModel::random_params(config, 7).data());
  models::LlamaLayout layout(config);
  ops::AdamWConfig adam;
  adam.lr = 1e-2f, adam.weight_decay = 0.1f;
  train::Optimizer opt(dp, train::decay_runs(layout), adam);
  GraphRun out;
  int64_t step = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (between) between(i, dp);
    const TestBatch& b = *steps[i];
    dp.zero_grad();
    try {
      parallel::LossStats st =
          dp.forward_backward(b.host(), models::kIgnoreIndex, static_cast<double>(b.counted()));
      dp.reduce_gradients();
      out.losses.push_back(st.loss_sum / st.count);
      opt.step(++step, adam.lr, 1.0);
    } catch (const Error&) {
      out.losses.push_back(std::nan(""));
    }
  }
  out.final_params.assign(layout.total(), 0.0f);
  dp.params_to_host(out.final_params.data());
  out.launches = dp.graph_launches();
  return out;
}

// The same losses and weights, bit for bit.
inline void check_same_bits(const GraphRun& got, const GraphRun& ref) {
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(&got.losses[i], &ref.losses[i], sizeof(double)) == 0);
  }
  REQUIRE(got.final_params.size() == ref.final_params.size());
  size_t differ = 0;
  for (size_t i = 0; i < ref.final_params.size(); ++i)
    differ += std::memcmp(&got.final_params[i], &ref.final_params[i], sizeof(float)) != 0;
  CHECK(differ == 0);
}

// The same losses and weights within a relative `tol`: on a GPU two eager runs
// differ in their last bits already (embedding backward sums with atomics, in
// whatever order the threads arrive), so a replay cannot be held to bits there.
inline void check_close(const GraphRun& got, const GraphRun& ref, double tol) {
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got.losses[i] - ref.losses[i]) <= tol * (1 + std::abs(ref.losses[i])));
  }
  REQUIRE(got.final_params.size() == ref.final_params.size());
  size_t differ = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.final_params.size(); ++i) {
    const double d = std::abs(double(got.final_params[i]) - ref.final_params[i]);
    worst = std::max(worst, d);
    differ += !(d <= tol * (1 + std::abs(double(ref.final_params[i]))));
  }
  CAPTURE(worst);
  CHECK(differ == 0);
}

// The bits where the device is deterministic (CPU), else close within `tol`.
inline void check_same(const GraphRun& got, const GraphRun& ref, double tol) {
  if (tol == 0)
    check_same_bits(got, ref);
  else
    check_close(got, ref, tol);
}

// On each device list, dp and zero1 in fp32 and bf16: four steps on one batch
// with graphs (step 1 eager, step 2 recorded and launched, steps 3 and 4
// launched, on every replica) are the eager run (bit for bit when tol is 0),
// and train.
inline void check_replays_match_eager(const std::vector<const char*>& device_lists,
                                      double tol = 0) {
  const TestBatch batch = make_batch(5, 8, 61, 31, {1, 0, 4, 2, 0});
  const std::vector<const TestBatch*> steps(4, &batch);
  for (const char* devices : device_lists) {
    for (parallel::Strategy st : {parallel::Strategy::dp, parallel::Strategy::zero1}) {
      for (DType working : {DType::f32, DType::bf16}) {
        CAPTURE(devices);
        CAPTURE(parallel::strategy_name(st));
        CAPTURE(dtype_name(working));
        const GraphRun eager = run_graph_steps(graph_options(devices, st, false), steps, working);
        const GraphRun graphed = run_graph_steps(graph_options(devices, st, true), steps, working);
        CHECK(eager.launches == 0);
        const auto replicas = static_cast<int64_t>(devices_parse(devices).size());
        CHECK(graphed.launches == 3 * replicas);  // else a recording failed: see stderr
        check_same(graphed, eager, tol);
        CHECK(graphed.losses[3] < graphed.losses[0]);
      }
    }
  }
}

}  // namespace fanout::test
