// LlamaModel as a Replica: forward_loss against a host cross-entropy of
// forward_logits, backward through the loss against backward through host
// dlogits, the grad-ready ranges, gradient accumulation, a device-independent
// init_random, and the HF names and order of LlamaLayout.

#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "models/llama_model.h"
#include "tests/models/llama_test_util.h"

using namespace fanout;
using namespace fanout::models;

namespace {
LlamaConfig test_config(bool tied = false) {
  LlamaConfig c = llama_preset("tiny");
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = tied;
  return c;
}

// B = 2 rows of T = 9; row 1's last 3 targets are ignored.
struct TestBatch {
  int64_t B = 2, T = 9;
  std::vector<int32_t> inputs, targets;
  explicit TestBatch(int64_t vocab) {
    std::mt19937_64 rng(17);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
    for (int64_t i = 0; i < B * T; ++i) {
      inputs.push_back(tok(rng));
      targets.push_back(i >= 2 * T - 3 ? kIgnoreIndex : tok(rng));
    }
  }
  Tensor in(LlamaModel& m) const {
    return tensor_from_vector(m.compute_stream(), inputs, {B, T}, DType::i32, m.device());
  }
  Tensor tgt(LlamaModel& m) const {
    return tensor_from_vector(m.compute_stream(), targets, {B, T}, DType::i32, m.device());
  }
};

std::vector<float> host_logits(LlamaModel& m, const TestBatch& b) {
  return tensor_to_vector<float>(m.compute_stream(), m.forward_logits(b.in(m)));
}

// {loss sum, count} from forward_loss.
std::vector<float> loss_stats(LlamaModel& m, const TestBatch& b) {
  Tensor stats = Tensor::empty({2}, DType::f32, m.device());
  m.forward_loss(b.in(m), b.tgt(m), stats, kIgnoreIndex);
  return tensor_to_vector<float>(m.compute_stream(), stats);
}

std::vector<float> grads_of(LlamaModel& m) {
  return tensor_to_vector<float>(m.compute_stream(), m.grads());
}

double rel_l2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
}  // namespace

TEST_CASE("forward_loss equals the host cross-entropy of forward_logits") {
  LlamaModel m(test_config(), cpu_device(0));
  test::init_scaled(m, 3, 5.0f);
  TestBatch b(m.config().vocab_size);
  int64_t V = m.config().vocab_size;
  std::vector<float> logits = host_logits(m, b);
  double sum = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < b.B * b.T; ++n) {
    if (b.targets[n] == kIgnoreIndex) continue;
    const float* row = logits.data() + n * V;
    double max = *std::max_element(row, row + V), z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - max);
    sum += max + std::log(z) - row[b.targets[n]];
    ++count;
  }
  std::vector<float> stats = loss_stats(m, b);
  CHECK(stats[1] == count);
  CHECK(count == b.B * b.T - 3);
  CHECK(std::abs(stats[0] - sum) <= 1e-5 * std::abs(sum));
  CHECK(std::abs(sum / count - std::log(double(V))) > 0.1);  // not a uniform prediction
}

TEST_CASE("backward_from_loss equals backward_from_logits with host dlogits") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    LlamaModel m(test_config(tied), cpu_device(0));
    test::init_scaled(m, 4, 5.0f);
    TestBatch b(m.config().vocab_size);
    int64_t V = m.config().vocab_size, N = b.B * b.T;

    std::vector<float> stats = loss_stats(m, b);
    m.backward_from_loss(stats[1]);
    std::vector<float> through_loss = grads_of(m);

    m.zero_grads();
    std::vector<float> logits = host_logits(m, b);
    // dlogits = (softmax - onehot) / count on counted rows, 0 on ignored rows.
    std::vector<float> dlogits(logits.size(), 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      if (b.targets[n] == kIgnoreIndex) continue;
      const float* row = logits.data() + n * V;
      double max = *std::max_element(row, row + V), z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - max);
      for (int64_t v = 0; v < V; ++v) {
        double p = std::exp(double(row[v]) - max) / z - (v == b.targets[n] ? 1.0 : 0.0);
        dlogits[n * V + v] = static_cast<float>(p / stats[1]);
      }
    }
    Tensor d =
        tensor_from_vector(m.compute_stream(), dlogits, {b.B, b.T, V}, DType::f32, m.device());
    m.backward_from_logits(d);
    std::vector<float> through_logits = grads_of(m);

    for (const ParamInfo& p : m.layout().params()) {
      CAPTURE(p.name);
      const float* ref = through_logits.data() + p.offset;
      CHECK(std::any_of(ref, ref + p.numel, [](float g) { return g != 0.0f; }));
      CHECK(rel_l2(through_loss.data() + p.offset, ref, p.numel) < 1e-4);
    }
  }
}

TEST_CASE("grad-ready ranges arrive in decreasing order and tile the gradients once") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    LlamaModel m(test_config(tied), cpu_device(0));
    test::init_scaled(m, 5, 5.0f);
    TestBatch b(m.config().vocab_size);
    std::vector<std::pair<int64_t, int64_t>> ranges;
    m.set_grad_ready_callback([&](int64_t begin, int64_t end) { ranges.emplace_back(begin, end); });
    std::vector<float> stats = loss_stats(m, b);
    m.backward_from_loss(stats[1]);
    m.compute_stream().synchronize();

    REQUIRE(!ranges.empty());
    CHECK(ranges.front().second == m.params().numel());
    CHECK(ranges.back().first == 0);
    for (size_t i = 0; i < ranges.size(); ++i) {
      CAPTURE(i);
      CHECK(ranges[i].first < ranges[i].second);
      if (i + 1 < ranges.size()) CHECK(ranges[i + 1].second == ranges[i].first);
    }
    // One range per layer, the final norm (+ lm_head) and the embedding.
    CHECK(ranges.size() == static_cast<size_t>(m.config().num_hidden_layers + 2));

    // The dlogits path reports the same ranges; an empty callback stops them.
    std::vector<std::pair<int64_t, int64_t>> first = ranges;
    ranges.clear();
    std::vector<float> logits = host_logits(m, b);
    Tensor d = tensor_from_vector(m.compute_stream(), std::vector<float>(logits.size(), 1e-3f),
                                  {b.B, b.T, m.config().vocab_size}, DType::f32, m.device());
    m.backward_from_logits(d);
    CHECK(ranges == first);
    ranges.clear();
    m.set_grad_ready_callback({});
    m.backward_from_logits(d);
    m.compute_stream().synchronize();
    CHECK(ranges.empty());
  }
}

TEST_CASE("gradients accumulate across two backward passes without zero_grads") {
  LlamaModel m(test_config(), cpu_device(0));
  test::init_scaled(m, 6, 5.0f);
  TestBatch b(m.config().vocab_size);
  std::vector<float> stats = loss_stats(m, b);
  m.backward_from_loss(stats[1]);
  std::vector<float> once = grads_of(m);
  loss_stats(m, b);
  m.backward_from_loss(stats[1]);
  std::vector<float> twice = grads_of(m);
  std::vector<float> doubled(once.size());
  for (size_t i = 0; i < once.size(); ++i) doubled[i] = 2.0f * once[i];
  CHECK(rel_l2(twice.data(), doubled.data(), static_cast<int64_t>(once.size())) < 1e-5);
  m.zero_grads();
  std::vector<float> zeroed = grads_of(m);
  CHECK(std::all_of(zeroed.begin(), zeroed.end(), [](float g) { return g == 0.0f; }));
}

TEST_CASE("init_random depends only on the seed and sets norms to ones") {
  LlamaModel a(test_config(), cpu_device(0)), b(test_config(), cpu_device(1));
  a.init_random(42);
  b.init_random(42);
  std::vector<float> pa = tensor_to_vector<float>(a.compute_stream(), a.params());
  std::vector<float> pb = tensor_to_vector<float>(b.compute_stream(), b.params());
  CHECK(pa == pb);
  b.init_random(43);
  CHECK(tensor_to_vector<float>(b.compute_stream(), b.params()) != pa);

  for (const ParamInfo& p : a.layout().params()) {
    CAPTURE(p.name);
    const float* v = pa.data() + p.offset;
    if (p.shape.size() == 1) {
      CHECK(std::all_of(v, v + p.numel, [](float x) { return x == 1.0f; }));
      continue;
    }
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < p.numel; ++i) sum += v[i], sq += double(v[i]) * v[i];
    double mean = sum / p.numel, std = std::sqrt(sq / p.numel - mean * mean);
    CHECK(std::abs(mean) < 0.002);
    CHECK(std == doctest::Approx(0.02).epsilon(0.1));
  }
  // Named views read the same buffer.
  std::vector<float> norm =
      tensor_to_vector<float>(a.compute_stream(), a.param("model.norm.weight"));
  CHECK(norm == std::vector<float>(128, 1.0f));
  CHECK_THROWS_AS(a.param("model.no_such.weight"), Error);
}

TEST_CASE("LlamaLayout follows HF names order and shapes") {
  LlamaConfig c = test_config();
  int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  int64_t Hd = c.num_attention_heads * c.head_dim, KVd = c.num_key_value_heads * c.head_dim;
  LlamaLayout layout(c);
  const auto& p = layout.params();
  REQUIRE(p.size() == static_cast<size_t>(1 + 9 * c.num_hidden_layers + 2));
  CHECK(p.front().name == "model.embed_tokens.weight");
  CHECK(p.front().shape == Shape{V, C});
  const char* layer0[] = {
      "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
      "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight"};
  Shape shapes[] = {{Hd, C}, {KVd, C}, {KVd, C}, {C, Hd}, {I, C}, {I, C}, {C, I}, {C}, {C}};
  for (int i = 0; i < 9; ++i) {
    CAPTURE(i);
    CHECK(p[1 + i].name == std::string("model.layers.0.") + layer0[i]);
    CHECK(p[1 + i].shape == shapes[i]);
    CHECK(p[1 + i].decay == (shapes[i].size() == 2));
  }
  CHECK(p[10].name == "model.layers.1.self_attn.q_proj.weight");
  CHECK(p[p.size() - 2].name == "model.norm.weight");
  CHECK(p.back().name == "lm_head.weight");
  CHECK(p.back().shape == Shape{V, C});
  CHECK(layout.lm_head() == p.back().offset);
  // Contiguous, in order, and as many as the config counts.
  int64_t at = 0;
  for (const ParamInfo& q : p) {
    CHECK(q.offset == at);
    at += q.numel;
  }
  CHECK(layout.total() == at);
  CHECK(layout.total() == c.num_parameters());

  c.tie_word_embeddings = true;
  LlamaLayout tied(c);
  CHECK(tied.find("lm_head.weight") == nullptr);
  CHECK(tied.params().back().name == "model.norm.weight");
  CHECK(tied.lm_head() == tied.embed());
  CHECK(tied.total() == c.num_parameters());
  CHECK(tied.total() == layout.total() - V * C);
}
