// GPU: step graphs (Note [Step graphs]) on CUDA devices: each replica's forward
// and backward recorded as a CUDA graph at the second step and replayed, the
// eager steps' results (within the GPU's own run-to-run noise), on cuda:0 and cuda:0,cuda:0 in dp
// and zero1, fp32 (cuBLAS, the exact attention) and bf16 (cuBLASLt, cuDNN's attention, the fused
// classifier), through a change of batch shape and an evaluation that moves the
// activations.

#include <doctest/doctest.h>

#include "tests/engine/parallel/graphs_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::Strategy;

namespace {
// Two eager GPU runs already differ in their last bits (check_close); a replay of
// stale buffers or of another shape would be off by far more.
constexpr double kGpuTol = 1e-3;
}  // namespace

TEST_CASE("CUDA graphs replay each replica's step as the eager one, dp and zero1, fp32 and bf16") {
  check_replays_match_eager({"cuda:0", "cuda:0,cuda:0"}, kGpuTol);
}

TEST_CASE("CUDA graphs follow changes of shape and of the activations' buffers") {
  const TestBatch a = make_batch(4, 8, 61, 40, {0, 1, 2, 3});
  const TestBatch fewer_rows = make_batch(2, 8, 61, 41);
  const TestBatch big = make_batch(6, 16, 61, 42);
  const std::vector<const TestBatch*> steps = {&a, &a, &a, &fewer_rows, &a, &a, &a, &a};
  auto evaluate = [&](size_t i, parallel::DataParallel& dp) {
    if (i == 5) dp.evaluate(big.host(), models::kIgnoreIndex);
  };
  for (DType working : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(working));
    const GraphRun eager =
        run_graph_steps(graph_options("cuda:0", Strategy::dp, false), steps, working, evaluate);
    const GraphRun graphed =
        run_graph_steps(graph_options("cuda:0", Strategy::dp, true), steps, working, evaluate);
    // a: 1 eager, 2 recorded, 3 launched; 4 eager; 5 launched; the evaluation moves
    // the buffers: 6 eager, 7 recorded, 8 launched.
    CHECK(graphed.launches == 5);
    check_same(graphed, eager, kGpuTol);
  }
}
