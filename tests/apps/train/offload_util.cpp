#include "tests/apps/train/offload_util.h"

#include <doctest/doctest.h>

#include <cstring>

namespace fanout::test::offload {

models::LlamaConfig tiny_config() {
  models::LlamaConfig c;
  c.vocab_size = 64, c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8;
  c.max_position_embeddings = 32;
  c.validate("tiny_config");
  return c;
}

Batch::Batch() {
  for (int64_t i = 0; i < B * T; ++i) {
    inputs.push_back(static_cast<int32_t>((i * 7 + 3) % 64));
    const bool ignored = i / T == 1 && i % T >= T - 3;
    targets.push_back(ignored ? models::kIgnoreIndex : static_cast<int32_t>((i * 7 + 10) % 64));
    counted += !ignored;
  }
}

train::TrainingOptions options_for(const Run& r) {
  train::TrainingOptions o;
  o.config = tiny_config();
  for (int i = 0; i < r.devices; ++i)
    o.devices.push_back(r.kind == DeviceKind::cuda ? cuda_device(0) : cpu_device(i));
  o.strategy = r.strategy;
  o.working = r.working;
  o.offload_optimizer = r.offload;
  o.adam.lr = 1e-2f;
  o.adam.weight_decay = 0.1f;
  return o;
}

std::unique_ptr<train::Training> make_training(const Run& r, const float* values) {
  train::InitialWeights w;
  w.seed = kSeed;
  w.values = values;
  return std::make_unique<train::Training>(options_for(r), w);
}

void gradients(train::Training& t, const Batch& b) {
  t.forward_backward(b.host(), static_cast<double>(b.counted));
  t.reduce_gradients();
}

double train_step(train::Training& t, const Batch& b, int64_t step) {
  gradients(t, b);
  return t.optimizer_step(step, 1e-2f, 1.0);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

State state_of(train::Optimizer& opt) {
  State s;
  opt.state_to_host(s.m, s.v);
  return s;
}

Steps run_steps(const Run& r, const Batch& b, int steps) {
  Steps out;
  auto t = make_training(r);
  for (int64_t step = 1; step <= steps; ++step) {
    out.norms.push_back(train_step(*t, b, step));
    out.params.push_back(t->params_to_host());
  }
  out.state = state_of(t->optimizer());
  return out;
}

size_t live(Allocator& a, MemTag tag) {
  return a.stats().tag(tag).live;
}

HostLive host_live() {
  Allocator& host = host_allocator();
  return {live(host, MemTag::optimizer), live(host, MemTag::params), live(host, MemTag::grads)};
}

void check_host_holds(const HostLive& before, bool offload, int64_t P) {
  const HostLive now = host_live();
  const size_t n = sizeof(float) * static_cast<size_t>(P);
  CHECK(now.optimizer - before.optimizer == (offload ? 2 * n : 0));
  CHECK(now.params - before.params == (offload ? n : 0));
  CHECK(now.grads - before.grads == (offload ? n : 0));
}

void check_host_back(const HostLive& before) {
  const HostLive now = host_live();
  CHECK(now.optimizer == before.optimizer);
  CHECK(now.params == before.params);
  CHECK(now.grads == before.grads);
}

}  // namespace fanout::test::offload
