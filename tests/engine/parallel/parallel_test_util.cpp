#include "tests/engine/parallel/parallel_test_util.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "apps/train/optimizer.h"
#include "engine/parallel/pipeline/balance.h"
#include "models/llama_model.h"

namespace fanout::test {

models::LlamaConfig small_test_config() {
  models::LlamaConfig c;
  c.vocab_size = 61, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8;
  c.max_position_embeddings = 64;
  return c;
}

const std::vector<ParallelMode> kParallelModes = {
    {"dp", parallel::Strategy::dp, parallel::LossOn::output, false},
    {"dp --loss-on replicas", parallel::Strategy::dp, parallel::LossOn::replicas, false},
    {"dp --overlap", parallel::Strategy::dp, parallel::LossOn::output, true},
    {"dp --loss-on replicas --overlap", parallel::Strategy::dp, parallel::LossOn::replicas, true},
    {"zero1", parallel::Strategy::zero1, parallel::LossOn::replicas, false},
    {"zero1 --loss-on output", parallel::Strategy::zero1, parallel::LossOn::output, false},
    {"zero1 --overlap", parallel::Strategy::zero1, parallel::LossOn::replicas, true},
    {"zero2", parallel::Strategy::zero2, parallel::LossOn::replicas, false},
    {"zero2 --loss-on output", parallel::Strategy::zero2, parallel::LossOn::output, false},
    {"zero3", parallel::Strategy::zero3, parallel::LossOn::replicas, false},
    {"zero3 --loss-on output", parallel::Strategy::zero3, parallel::LossOn::output, false},
};

parallel::DataParallelOptions mode_options(const ParallelMode& m, const std::string& devices) {
  parallel::DataParallelOptions o;
  o.device_ids = devices_parse(devices);
  o.strategy = m.strategy;
  o.loss_on = m.loss_on;
  o.overlap = m.overlap;
  o.bucket_mb = 0.02;
  return o;
}

int64_t TestBatch::counted() const {
  int64_t n = 0;
  for (int32_t t : targets) n += t >= 0;
  return n;
}

TestBatch make_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed,
                     const std::vector<int64_t>& pad) {
  TestBatch b;
  b.B = B, b.T = T;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  for (int64_t r = 0; r < B; ++r) {
    int64_t padded = r < static_cast<int64_t>(pad.size()) ? pad[r] : 0;
    for (int64_t t = 0; t < T; ++t) {
      b.inputs.push_back(tok(rng));
      b.targets.push_back(t >= T - padded ? models::kIgnoreIndex : tok(rng));
    }
  }
  return b;
}

RunResult run_data_parallel(parallel::DataParallelOptions options, const TestBatch& batch,
                            int steps, uint64_t seed, DType working,
                            const models::LlamaConfig* model,
                            std::optional<bool> fused_classifier) {
  models::LlamaConfig config = model ? *model : small_test_config();
  std::vector<Device> ids = options.device_ids;
  auto factory = [&](Device d, int i) {
    auto m = std::make_unique<models::LlamaModel>(
        config, d, parallel::replica_lane(ids, i, "compute"), working);
    if (fused_classifier) m->set_fused_classifier(*fused_classifier);
    return m;
  };
  parallel::DataParallel dp(factory, options);
  RunResult out;
  out.init_params = models::LlamaModel::random_params(config, seed);
  dp.params_from_host(out.init_params.data());
  models::LlamaLayout layout(config);
  ops::AdamWConfig adam;
  adam.lr = 1e-2f, adam.weight_decay = 0.1f, adam.beta1 = 0.9f, adam.beta2 = 0.95f;
  train::Optimizer opt(dp, train::decay_runs(layout), adam);
  for (int step = 1; step <= steps; ++step) {
    dp.reset_times();
    dp.zero_grad();
    parallel::LossStats st = dp.forward_backward(batch.host(), models::kIgnoreIndex,
                                                 static_cast<double>(batch.counted()));
    dp.reduce_gradients();
    out.losses.push_back(st.loss_sum / st.count);
    if (step == 1) {
      out.first_grads.assign(layout.total(), 0.0f);
      std::vector<Tensor> grads;
      for (const auto& sh : dp.shards()) grads.push_back(dp.shard_grads(sh));
      dp.shards_to_host(grads, out.first_grads.data());
    }
    out.grad_norms.push_back(opt.step(step, adam.lr, 1.0));
    out.last_step_bytes = dp.comm_bytes();
  }
  out.final_params.assign(layout.total(), 0.0f);
  dp.params_to_host(out.final_params.data());  // zero1 bf16 and zero3: from the shards' owners
  return out;
}

std::function<void(Stream&, int, int, const parallel::Action&)> random_delay_hook(
    unsigned seed, std::atomic<int>& delayed) {
  struct Shared {
    std::mutex mu;
    std::mt19937 rng;
  };
  auto shared = std::make_shared<Shared>();
  shared->rng.seed(seed);
  return [shared, &delayed](Stream& stream, int, int, const parallel::Action&) {
    int us = 0;
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      us = std::uniform_int_distribution<int>(0, 3000)(shared->rng);
    }
    stream.enqueue([us] { std::this_thread::sleep_for(std::chrono::microseconds(us)); });
    ++delayed;
  };
}

std::unique_ptr<parallel::Pipeline> make_pipeline(const PipelineSetup& setup,
                                                  const models::LlamaConfig& config,
                                                  DType working) {
  parallel::PipelineOptions o;
  const int n = setup.stages * setup.replicas * setup.tensor;
  std::string devices = setup.devices;
  if (devices.empty())
    for (int i = 0; i < n; ++i) devices += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  o.devices = devices_parse(devices);
  o.stages = setup.stages;
  o.tensor = setup.tensor;
  o.grad_comm = setup.grad_comm;
  o.micro_batches = setup.micro_batches;
  o.schedule = setup.schedule;
  o.cut = setup.cut;
  if (o.cut.empty()) {
    models::LlamaModel probe(config, cpu_device(0));
    std::vector<double> costs;
    for (const auto& u : probe.units()) costs.push_back(static_cast<double>(u.end - u.begin));
    o.cut = parallel::balance_cut(costs, setup.stages);
  }
  o.strategy = setup.strategy;
  o.overlap = setup.overlap;
  o.fault_hook = setup.fault_hook;
  o.delay_hook = setup.delay_hook;
  const bool recompute = setup.recompute;
  const int T = setup.tensor;
  const bool sequence = setup.sequence;
  auto factory = [&config, working, recompute, T, sequence](const parallel::StageSpot& at) {
    auto m = std::make_unique<models::LlamaModel>(
        config, at.device,
        at.device.str() + " stage " + std::to_string(at.stage) + "." + std::to_string(at.replica) +
            "." + std::to_string(at.tensor_rank),
        working, models::TensorShard{at.tensor_rank, T, at.peers, sequence});
    m->set_stage(at.first_unit, at.last_unit);
    m->set_recompute(recompute);
    return m;
  };
  return std::make_unique<parallel::Pipeline>(factory, o);
}

RunResult run_pipeline(const PipelineSetup& setup, const TestBatch& batch, int steps, uint64_t seed,
                       DType working, const models::LlamaConfig* model) {
  models::LlamaConfig config = model ? *model : small_test_config();
  auto pipe = make_pipeline(setup, config, working);
  RunResult out;
  out.init_params = models::LlamaModel::random_params(config, seed);
  pipe->params_from_host(out.init_params.data());
  models::LlamaLayout layout(config);
  ops::AdamWConfig adam;
  adam.lr = 1e-2f, adam.weight_decay = 0.1f, adam.beta1 = 0.9f, adam.beta2 = 0.95f;
  const models::LlamaLayout shard(
      setup.tensor > 1 ? models::tensor_shard_config(config, setup.tensor) : config);
  train::Optimizer opt(*pipe, train::decay_runs(shard, setup.tensor), adam);
  for (int step = 1; step <= steps; ++step) {
    pipe->zero_grad();
    parallel::LossStats st = pipe->forward_backward(batch.host(), models::kIgnoreIndex,
                                                    static_cast<double>(batch.counted()));
    pipe->reduce_gradients();
    out.losses.push_back(st.loss_sum / st.count);
    if (step == 1) {
      out.first_grads.assign(layout.total(), 0.0f);
      pipe->grads_to_host(out.first_grads.data());
    }
    out.grad_norms.push_back(opt.step(step, adam.lr, 1.0));
  }
  out.final_params.assign(layout.total(), 0.0f);
  pipe->params_to_host(out.final_params.data());
  return out;
}

void check_runs_close(const RunResult& got, const RunResult& ref, const models::LlamaConfig& config,
                      double loss_tol, double grad_tol, double update_tol) {
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(got.losses[s] - ref.losses[s]) <= loss_tol * std::abs(ref.losses[s]));
    CHECK(std::abs(got.grad_norms[s] - ref.grad_norms[s]) <= grad_tol * ref.grad_norms[s]);
  }
  const models::LlamaLayout layout(config);
  for (const models::ParamInfo& p : layout.params()) {
    CAPTURE(p.name);
    std::vector<float> a(got.first_grads.begin() + p.offset,
                         got.first_grads.begin() + p.offset + p.numel);
    std::vector<float> b(ref.first_grads.begin() + p.offset,
                         ref.first_grads.begin() + p.offset + p.numel);
    CHECK(rel_l2(a, b) <= grad_tol);
  }
  const std::vector<float> du = difference(got.final_params, got.init_params);
  const std::vector<float> dr = difference(ref.final_params, ref.init_params);
  REQUIRE(rel_l2(dr, std::vector<float>(dr.size(), 0.0f)) > 0);  // the reference moved
  CHECK(rel_l2(du, dr) <= update_tol);
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::vector<float> difference(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

}  // namespace fanout::test
