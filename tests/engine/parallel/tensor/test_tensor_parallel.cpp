// The tensor-parallel invariant: a model split over T devices (heads, MLP units
// and the vocabulary) computes what one device computes on the whole batch --
// alone, inside pipeline stages and across data-parallel replicas, fp32 and
// bf16, tied or not, with GQA groups split; a failing rank stops its peers.

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "engine/core/check.h"
#include "engine/parallel/grid.h"
#include "engine/parallel/tensor/tensor_peers.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "models/llama_tensor.h"
#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

struct Tolerance {
  double loss, grad, update;
};
constexpr Tolerance kF32{1e-5, 1e-5, 1e-3};
// bf16 as the pipeline's and data parallelism's bf16 tests state it: the sums
// over ranks run in another order than one device's GEMM, and a last-bit flip
// before a bf16 store moves a value by 2^-8.
constexpr Tolerance kBf16{1e-4, 1e-3, 1e-2};

models::LlamaConfig tp_config(int64_t heads, int64_t kv, bool tied) {
  models::LlamaConfig c = small_test_config();
  c.num_attention_heads = heads, c.num_key_value_heads = kv;
  c.tie_word_embeddings = tied;
  return c;
}

TestBatch tp_batch() {
  return make_batch(8, 8, 61, 21, {0, 3, 7, 1, 0, 5, 2, 8});
}

RunResult one_device(const TestBatch& batch, const models::LlamaConfig& config, DType working) {
  parallel::DataParallelOptions o;
  o.device_ids = {cpu_device(0)};
  return run_data_parallel(o, batch, 3, 7, working, &config, false);
}

RunResult grid(const TestBatch& batch, const models::LlamaConfig& config, DType working, int D,
               int K, int T, bool sequence = false) {
  PipelineSetup setup;
  setup.replicas = D, setup.stages = K, setup.tensor = T, setup.micro_batches = 1;
  setup.sequence = sequence;
  return run_pipeline(setup, batch, 3, 7, working, &config);
}

}  // namespace

TEST_CASE(
    "tensor parallel: T ranks equal one device, GQA split by groups, with and without sequence "
    "parallelism") {
  const TestBatch batch = tp_batch();
  struct Shape {
    int64_t heads, kv;
    int T;
  };
  const Shape shapes[] = {{4, 2, 2}, {8, 2, 2}, {4, 4, 4}, {8, 4, 4}, {6, 3, 3}};
  for (DType working : {DType::f32, DType::bf16}) {
    const Tolerance tol = working == DType::f32 ? kF32 : kBf16;
    for (bool tied : {false, true}) {
      for (const Shape& sh : shapes) {
        const models::LlamaConfig config = tp_config(sh.heads, sh.kv, tied);
        CAPTURE(dtype_name(working));
        CAPTURE(tied);
        CAPTURE(sh.heads);
        CAPTURE(sh.kv);
        CAPTURE(sh.T);
        const RunResult ref = one_device(batch, config, working);
        REQUIRE(ref.losses[2] < ref.losses[0]);
        for (bool sequence : {false, true}) {
          CAPTURE(sequence);
          check_runs_close(grid(batch, config, working, 1, 1, sh.T, sequence), ref, config,
                           tol.loss, tol.grad, tol.update);
        }
      }
    }
  }
}

TEST_CASE("tensor parallel: each rank's logits are its vocabulary rows of one device's") {
  const TestBatch batch = tp_batch();
  for (bool sequence : {false, true}) {
    for (int T : {2, 4}) {
      CAPTURE(sequence);
      CAPTURE(T);
      const models::LlamaConfig config = tp_config(8, 4, false);
      const int64_t B = batch.B, S = batch.T, N = B * S, V = config.vocab_size;
      models::LlamaModel whole(config, cpu_device(0));
      whole.init_random(7);
      Tensor tokens = Tensor::empty({B, S}, DType::i32, cpu_device(0));
      tensor_upload(whole.compute_stream(), tokens, batch.inputs.data());
      const std::vector<float> ref =
          tensor_to_vector<float>(whole.compute_stream(), whole.forward_logits(tokens));
      std::vector<Device> devices;
      for (int t = 0; t < T; ++t) devices.push_back(cpu_device(1 + t));
      parallel::TensorPeers peers(devices);
      std::vector<std::vector<float>> got(T);
      std::vector<std::thread> threads;
      for (int t = 0; t < T; ++t) {
        threads.emplace_back([&, t] {
          models::LlamaModel shard(config, devices[t], "", DType::f32,
                                   models::TensorShard{t, T, &peers, sequence});
          shard.init_random(7);
          Tensor mine = Tensor::empty({B, S}, DType::i32, devices[t]);
          tensor_upload(shard.compute_stream(), mine, batch.inputs.data());
          got[t] = tensor_to_vector<float>(shard.compute_stream(), shard.forward_logits(mine));
        });
      }
      for (auto& th : threads) th.join();
      const int64_t rows = models::tensor_vocab_rows(config, T);
      double worst = 0, scale = 0;
      for (int t = 0; t < T; ++t) {
        REQUIRE(static_cast<int64_t>(got[t].size()) == N * rows);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < rows && t * rows + j < V; ++j) {
            const double r = ref[n * V + t * rows + j];
            worst = std::max(worst, std::abs(got[t][n * rows + j] - r));
            scale = std::max(scale, std::abs(r));
          }
      }
      CHECK(worst <= 1e-5 * scale);
    }
  }
}

TEST_CASE("tensor parallel inside pipeline stages: every schedule, M below and above K") {
  const TestBatch batch = tp_batch();
  for (DType working : {DType::f32, DType::bf16}) {
    const Tolerance tol = working == DType::f32 ? kF32 : kBf16;
    for (bool tied : {false, true}) {
      const models::LlamaConfig config = tp_config(4, 2, tied);
      const RunResult ref = one_device(batch, config, working);
      for (parallel::PipeSchedule sched :
           {parallel::PipeSchedule::gpipe, parallel::PipeSchedule::one_f_one_b,
            parallel::PipeSchedule::zb1}) {
        for (int M : {1, 3}) {
          CAPTURE(dtype_name(working));
          CAPTURE(tied);
          CAPTURE(parallel::pipe_schedule_name(sched));
          CAPTURE(M);
          for (bool sequence : {false, true}) {
            CAPTURE(sequence);
            PipelineSetup setup;
            setup.stages = 2, setup.tensor = 2, setup.micro_batches = M, setup.schedule = sched;
            setup.sequence = sequence;
            check_runs_close(run_pipeline(setup, batch, 3, 7, working, &config), ref, config,
                             tol.loss, tol.grad, tol.update);
          }
        }
      }
    }
  }
}

TEST_CASE("the 2 x 2 x 2 grid (dp x pp x tp) on 8 CPU devices equals one device") {
  const TestBatch batch = tp_batch();
  for (bool tied : {false, true}) {
    const models::LlamaConfig config = tp_config(4, 2, tied);
    const RunResult ref = one_device(batch, config, DType::f32);
    for (parallel::Strategy strategy : {parallel::Strategy::dp, parallel::Strategy::zero1}) {
      for (bool overlap : {false, true}) {
        CAPTURE(tied);
        CAPTURE(parallel::strategy_name(strategy));
        CAPTURE(overlap);
        for (bool sequence : {false, true}) {
          CAPTURE(sequence);
          PipelineSetup setup;
          setup.replicas = 2, setup.stages = 2, setup.tensor = 2, setup.micro_batches = 2;
          setup.strategy = strategy, setup.overlap = overlap, setup.sequence = sequence;
          check_runs_close(run_pipeline(setup, batch, 3, 7, DType::f32, &config), ref, config,
                           kF32.loss, kF32.grad, kF32.update);
        }
      }
    }
  }
  // dp x tp without stages, bf16, sequence parallel.
  const models::LlamaConfig config = tp_config(8, 4, false);
  check_runs_close(grid(batch, config, DType::bf16, 2, 1, 4, true),
                   one_device(batch, config, DType::bf16), config, kBf16.loss, kBf16.grad,
                   kBf16.update);
}

TEST_CASE("the grid's replicas sum their gradients in bf16 under --grad-comm bf16") {
  const TestBatch batch = tp_batch();
  const models::LlamaConfig config = tp_config(4, 2, false);
  for (parallel::Strategy strategy : {parallel::Strategy::dp, parallel::Strategy::zero1}) {
    for (int T : {1, 2}) {
      CAPTURE(parallel::strategy_name(strategy));
      CAPTURE(T);
      PipelineSetup setup;
      setup.replicas = 2, setup.stages = 2, setup.tensor = T, setup.micro_batches = 2;
      setup.strategy = strategy;
      const RunResult f32 = run_pipeline(setup, batch, 3, 7, DType::f32, &config);
      setup.grad_comm = DType::bf16;
      const RunResult bf16 = run_pipeline(setup, batch, 3, 7, DType::f32, &config);
      // Each replica's gradients are rounded once before they are summed.
      const double diff = rel_l2(bf16.first_grads, f32.first_grads);
      CHECK(diff > 0);
      CHECK(diff <= 4e-3);
      check_runs_close(bf16, f32, config, 1e-3, 4e-3, 5e-2);
    }
  }
}

TEST_CASE("tensor parallel: --recompute is bit-identical") {
  const TestBatch batch = tp_batch();
  const models::LlamaConfig config = tp_config(4, 2, false);
  for (DType working : {DType::f32, DType::bf16}) {
    PipelineSetup setup;
    setup.stages = 2, setup.tensor = 2, setup.micro_batches = 2, setup.sequence = true;
    setup.schedule = parallel::PipeSchedule::zb1;
    const RunResult kept = run_pipeline(setup, batch, 2, 7, working, &config);
    setup.recompute = true;
    const RunResult again = run_pipeline(setup, batch, 2, 7, working, &config);
    CHECK(again.losses == kept.losses);
    CHECK(again.grad_norms == kept.grad_norms);
    CHECK(again.first_grads == kept.first_grads);
    CHECK(again.final_params == kept.final_params);
  }
}

TEST_CASE("tensor parallel: each rank holds a 1/T share of the weights, gradients and state") {
  const TestBatch batch = tp_batch();
  models::LlamaConfig config = tp_config(8, 4, false);
  config.vocab_size = 64;  // no padding: the shares are exact but for the norms
  auto bytes = [&](int T, MemTag tag) {
    PipelineSetup setup;
    setup.stages = 1, setup.tensor = T, setup.micro_batches = 1;
    std::string devices;
    for (int t = 0; t < T; ++t) devices += (t ? ",cpu:" : "cpu:") + std::to_string(8 + t);
    setup.devices = devices;  // devices no other test here touches
    auto pipe = make_pipeline(setup, config);
    pipe->params_from_host(models::LlamaModel::random_params(config, 7).data());
    pipe->zero_grad();
    std::vector<size_t> out;
    for (int t = 0; t < T; ++t) out.push_back(pipe->memory(0, 0, t).tag(tag).live);
    return out;
  };
  const models::LlamaLayout whole(config);
  const int64_t norms = (2 * config.num_hidden_layers + 1) * config.hidden_size;
  for (int T : {2, 4}) {
    CAPTURE(T);
    for (MemTag tag : {MemTag::params, MemTag::grads}) {
      const std::vector<size_t> per_rank = bytes(T, tag);
      for (size_t b : per_rank)
        CHECK(b == static_cast<size_t>(((whole.total() - norms) / T + norms) * 4));
    }
  }
}

TEST_CASE("sequence parallelism: each rank keeps its share of the residual stream") {
  const TestBatch batch = tp_batch();
  models::LlamaConfig config = tp_config(4, 2, false);
  config.num_hidden_layers = 6;  // residual streams dominate what sequence parallelism shards
  auto activations = [&](bool sequence) {
    PipelineSetup setup;
    setup.stages = 1, setup.tensor = 2, setup.micro_batches = 1, setup.sequence = sequence;
    setup.devices = "cpu:12,cpu:13";  // devices no other test here touches
    auto pipe = make_pipeline(setup, config);
    pipe->params_from_host(models::LlamaModel::random_params(config, 7).data());
    pipe->zero_grad();
    pipe->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
    return pipe->memory(0, 0, 1).tag(MemTag::activations).live;
  };
  const size_t whole = activations(false), shared = activations(true);
  CAPTURE(whole);
  CAPTURE(shared);
  // 13 residual buffers of (tokens x hidden) f32 halve; two gathered ones are added.
  const size_t stream = 64 * 32 * 4;  // 64 tokens x hidden 32 x 4 bytes
  CHECK(shared + 4 * stream <= whole);
}

TEST_CASE("tensor parallel: a failing rank is named, its peers stop, the next step runs clean") {
  const TestBatch batch = tp_batch();
  const models::LlamaConfig config = tp_config(4, 2, false);
  for (parallel::ActionKind kind :
       {parallel::ActionKind::forward, parallel::ActionKind::backward}) {
    CAPTURE(parallel::action_kind_letter(kind));
    PipelineSetup setup;
    setup.stages = 2, setup.tensor = 2, setup.micro_batches = 2;
    std::atomic<bool> armed{false};
    // One lane of the two tensor ranks of stage 1 throws: the first to get there.
    setup.fault_hook = [&](int stage, int, const parallel::Action& a) {
      if (stage == 1 && a.kind == kind && a.micro == 1 && armed.exchange(false))
        throw Error("injected failure");
    };
    auto pipe = make_pipeline(setup, config);
    auto init = models::LlamaModel::random_params(config, 7);
    pipe->params_from_host(init.data());
    armed = true;
    pipe->zero_grad();
    CHECK_THROWS_WITH_AS(
        pipe->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted())),
        doctest::Contains("injected failure"), Error);
    CHECK_FALSE(armed.load());
    pipe->zero_grad();
    auto st = pipe->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
    pipe->reduce_gradients();
    std::vector<float> grads(init.size());
    pipe->grads_to_host(grads.data());
    auto fresh = make_pipeline(setup, config);
    fresh->params_from_host(init.data());
    fresh->zero_grad();
    auto st2 = fresh->forward_backward(batch.host(), models::kIgnoreIndex, double(batch.counted()));
    fresh->reduce_gradients();
    std::vector<float> grads2(init.size());
    fresh->grads_to_host(grads2.data());
    CHECK(st.loss_sum == st2.loss_sum);
    CHECK(grads == grads2);
  }
}

TEST_CASE("tensor parallel: a T that does not divide the model is refused in one line") {
  CHECK_THROWS_WITH_AS(models::check_tensor_parallel(tp_config(4, 2, false), 4),
                       "--tp 4 does not divide num_key_value_heads (2): each device holds an equal "
                       "share of them",
                       Error);
  CHECK_THROWS_WITH_AS(models::check_tensor_parallel(tp_config(6, 2, false), 4),
                       doctest::Contains("num_attention_heads (6)"), Error);
  models::LlamaConfig c = tp_config(4, 4, false);
  c.intermediate_size = 50;
  CHECK_THROWS_WITH_AS(models::check_tensor_parallel(c, 4),
                       doctest::Contains("intermediate_size (50)"), Error);
  CHECK_NOTHROW(models::check_tensor_parallel(tp_config(8, 4, false), 4));
}

TEST_CASE("tensor parallel: the pieces of the shards tile the whole layout once") {
  for (bool tied : {false, true}) {
    for (int T : {1, 2, 3, 4}) {
      models::LlamaConfig c = tp_config(12, 12, tied);
      CAPTURE(T);
      CAPTURE(tied);
      const models::LlamaLayout whole(c);
      std::vector<int> seen(whole.total(), 0);
      for (int t = 0; t < T; ++t) {
        const models::LlamaLayout shard(models::tensor_shard_config(c, T));
        int64_t prev = -1;
        for (const parallel::FlatPiece& p : models::tensor_shard_pieces(c, T, t)) {
          CHECK(p.local >= prev);  // in the shard layout's order, not overlapping
          prev = p.local + p.count;
          CHECK(prev <= shard.total());
          if (p.shared && t > 0) continue;
          for (int64_t i = 0; i < p.count; ++i) ++seen[p.whole + i];
        }
      }
      CHECK(std::count(seen.begin(), seen.end(), 1) == whole.total());
    }
  }
}

TEST_CASE("the grid in words") {
  const auto devs = devices_parse("cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5,cpu:6,cpu:7");
  CHECK(parallel::describe_grid(devs, 2, 2) ==
        "2 replicas x 2 stages x 2 tensor ranks: replica 0 = stage 0 on cpu:0+cpu:1, stage 1 on "
        "cpu:2+cpu:3; replica 1 = stage 0 on cpu:4+cpu:5, stage 1 on cpu:6+cpu:7");
  CHECK(parallel::describe_grid(std::vector<Device>(devs.begin(), devs.begin() + 4), 1, 4) ==
        "4 tensor ranks: cpu:0+cpu:1+cpu:2+cpu:3");
  CHECK_THROWS_AS(parallel::describe_grid(devs, 3, 1), Error);
}
