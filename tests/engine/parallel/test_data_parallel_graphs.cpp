// Step graphs (Note [Step graphs]) on CPU devices: each replica's forward and
// backward recorded at the second step with a key and replayed after it, bit for
// bit the eager steps' results, through changes of batch shape, evaluations that
// move the activations, a failing replica and every mode that allows them.

#include <doctest/doctest.h>

#include <cmath>

#include "tests/engine/parallel/graphs_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::Strategy;

TEST_CASE("graphs replay each replica's step bit for bit, dp and zero1, fp32 and bf16") {
  check_replays_match_eager({"cpu:0", "cpu:0,cpu:1"});
}

TEST_CASE("a step of another shape runs eagerly and leaves the graph in place") {
  const TestBatch a = make_batch(4, 8, 61, 40, {0, 1, 2, 3});
  const TestBatch fewer_rows = make_batch(2, 8, 61, 41);
  const TestBatch more_ignored = make_batch(4, 8, 61, 40, {3, 3, 3, 3});  // another normalizer
  const std::vector<const TestBatch*> steps = {&a, &a, &a, &fewer_rows, &a, &more_ignored, &a, &a};
  const GraphRun eager = run_graph_steps(graph_options("cpu:0", Strategy::dp, false), steps);
  const GraphRun graphed = run_graph_steps(graph_options("cpu:0", Strategy::dp, true), steps);
  // a: eager, recorded, replayed; the other two eager; a replays around them.
  CHECK(graphed.launches == 5);
  check_same_bits(graphed, eager);
}

TEST_CASE("a key that changes for good is recorded again") {
  const TestBatch a = make_batch(4, 8, 61, 50);
  const TestBatch b = make_batch(3, 8, 61, 51);
  const std::vector<const TestBatch*> steps = {&a, &a, &b, &b, &b, &a};
  const GraphRun eager =
      run_graph_steps(graph_options("cpu:0,cpu:1", Strategy::zero1, false), steps);
  const GraphRun graphed =
      run_graph_steps(graph_options("cpu:0,cpu:1", Strategy::zero1, true), steps);
  // Per replica: a launched at step 2; b eager at 3, recorded at 4, launched at 5;
  // a eager again at 6 (its graph was replaced).
  CHECK(graphed.launches == 2 * 3);
  check_same_bits(graphed, eager);
}

TEST_CASE(
    "an evaluation that grows the activations drops the graph, and the next steps record "
    "again") {
  const TestBatch a = make_batch(2, 8, 61, 60);
  const TestBatch big = make_batch(6, 16, 61, 61);
  const std::vector<const TestBatch*> steps(6, &a);
  auto evaluate = [&](size_t i, parallel::DataParallel& dp) {
    if (i == 3) dp.evaluate(big.host(), models::kIgnoreIndex);
  };
  for (DType working : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(working));
    const GraphRun eager =
        run_graph_steps(graph_options("cpu:0", Strategy::dp, false), steps, working, evaluate);
    const GraphRun graphed =
        run_graph_steps(graph_options("cpu:0", Strategy::dp, true), steps, working, evaluate);
    // Steps 2, 3 launched; the evaluation moved the buffers: 4 eager, 5 and 6 launched.
    CHECK(graphed.launches == 4);
    check_same_bits(graphed, eager);
  }
}

TEST_CASE("a replica failing at a graphed step recovers, and the run matches the eager one") {
  const TestBatch a = make_batch(4, 8, 61, 70, {0, 2, 1, 0});
  const std::vector<const TestBatch*> steps(6, &a);
  auto run = [&](bool graphs) {
    parallel::DataParallelOptions o = graph_options("cpu:0,cpu:1", Strategy::dp, graphs);
    auto calls = std::make_shared<int>(0);
    o.fault_hook = [calls](int replica, const std::string& phase) {
      // Replica 1's fourth backward: a launch of its graph.
      if (replica == 1 && phase == "backward" && ++*calls == 4) throw Error("injected fault");
    };
    return run_graph_steps(o, steps);
  };
  const GraphRun eager = run(false), graphed = run(true);
  REQUIRE(std::isnan(graphed.losses[3]));
  REQUIRE(std::isnan(eager.losses[3]));
  // Per replica: launched at 2 and 3 (replica 1's fault at 4 stops before its launch,
  // replica 0's launch runs); recover() drops the graphs: 5 eager, 6 recorded.
  CHECK(graphed.launches == 2 + 2 + 1 + 2);
  check_same_bits(graphed, eager);
}

TEST_CASE("graphs refuse the modes that need the host inside backward") {
  const TestBatch batch = make_batch(2, 8, 61, 80);
  struct Refused {
    Strategy strategy;
    parallel::LossOn loss_on;
    bool overlap;
    const char* says;
  };
  for (const Refused& r : {
           Refused{Strategy::dp, parallel::LossOn::output, false, "the loss on the replicas"},
           Refused{Strategy::dp, parallel::LossOn::replicas, true, "overlap"},
           Refused{Strategy::zero1, parallel::LossOn::replicas, true, "overlap"},
           Refused{Strategy::zero2, parallel::LossOn::replicas, false, "zero2"},
           Refused{Strategy::zero3, parallel::LossOn::replicas, false, "zero3"},
       }) {
    CAPTURE(r.says);
    parallel::DataParallelOptions o = graph_options("cpu:0,cpu:1", r.strategy, true);
    o.loss_on = r.loss_on;
    o.overlap = r.overlap;
    CHECK_THROWS_WITH_AS(run_graph_steps(o, {&batch}), doctest::Contains(r.says), Error);
  }
}

TEST_CASE("a replica whose activations move is recorded again, and its old ones are freed") {
  const TestBatch a = make_batch(2, 8, 61, 90);
  const std::vector<const TestBatch*> steps(6, &a);
  size_t live_late = 0;
  auto grow = [&](size_t i, parallel::DataParallel& dp) {
    if (i == 3) dp.replica(0).reserve(8, 8);  // a larger arena; the batch's buffers stay
    if (i == 5) live_late = allocator_for(dp.replica(0).device()).stats().total.live;
  };
  const GraphRun eager =
      run_graph_steps(graph_options("cpu:46", Strategy::dp, false), steps, DType::f32, grow);
  const size_t eager_live = live_late;
  const GraphRun graphed =
      run_graph_steps(graph_options("cpu:46", Strategy::dp, true), steps, DType::f32, grow);
  // Steps 2 and 3 launched; then 4 eager, 5 recorded, 6 launched.
  CHECK(graphed.launches == 4);
  check_same_bits(graphed, eager);
  // The old graph, which kept the old arena alive, is gone: as much memory is live
  // as in the eager run.
  CHECK(live_late == eager_live);
}
