// GPU: the tensor-parallel invariant on one GPU -- 2 ranks on "cuda:0,cuda:0"
// (and 2 stages x 2 ranks on cuda:0 x 4) against one cuda:0 on the whole batch,
// fp32 and bf16, tied or not, with and without sequence parallelism; the
// vocabulary-parallel loss on CUDA kernels.

#include <doctest/doctest.h>

#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;

TEST_CASE("tensor parallel on cuda:0 x T equals one cuda:0 on the whole batch") {
  const TestBatch batch = make_batch(8, 8, 61, 21, {0, 3, 7, 1, 0, 5, 2, 8});
  for (DType working : {DType::f32, DType::bf16}) {
    for (bool tied : {false, true}) {
      models::LlamaConfig config = small_test_config();
      config.tie_word_embeddings = tied;
      parallel::DataParallelOptions one;
      one.device_ids = {cuda_device(0)};
      // The shards compute f32 logits (no fused classifier): so does the reference.
      const RunResult ref = run_data_parallel(one, batch, 3, 7, working, &config, false);
      REQUIRE(ref.losses[2] < ref.losses[0]);
      for (int stages : {1, 2}) {
        for (bool sequence : {false, true}) {
          CAPTURE(dtype_name(working));
          CAPTURE(tied);
          CAPTURE(stages);
          CAPTURE(sequence);
          PipelineSetup setup;
          setup.stages = stages, setup.tensor = 2, setup.micro_batches = 2,
          setup.sequence = sequence;
          setup.devices = stages == 1 ? "cuda:0,cuda:0" : "cuda:0,cuda:0,cuda:0,cuda:0";
          RunResult got = run_pipeline(setup, batch, 3, 7, working, &config);
          if (working == DType::f32)
            check_runs_close(got, ref, config, 1e-5, 1e-5, 1e-3);
          else
            check_runs_close(got, ref, config, 1e-4, 1e-3, 1e-2);
        }
      }
    }
  }
}
