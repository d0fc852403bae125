// The KV cache of LlamaGenerator: logits from feeding a prompt and then one token
// at a time equal the logits at the same positions from one LlamaModel forward
// over the whole sequence, however the tokens are split into feed() calls.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/core/check.h"
#include "models/llama_generate.h"
#include "tests/models/llama_test_util.h"

using namespace fanout;
using namespace fanout::models;

namespace {
constexpr int64_t kLen = 12, kPrompt = 5;

LlamaConfig test_config() {
  LlamaConfig c = llama_preset("tiny");  // 4 heads over 2 kv heads: GQA
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 32;
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = tok(rng);
  return ids;
}

// Logits (T, V) of one forward over the whole sequence.
std::vector<std::vector<float>> full_logits(LlamaModel& m, const std::vector<int32_t>& ids) {
  int64_t T = static_cast<int64_t>(ids.size()), V = m.config().vocab_size;
  Tensor in = tensor_from_vector(m.compute_stream(), ids, {1, T}, DType::i32, m.device());
  std::vector<float> flat = tensor_to_vector<float>(m.compute_stream(), m.forward_logits(in));
  std::vector<std::vector<float>> rows;
  for (int64_t t = 0; t < T; ++t)
    rows.emplace_back(flat.begin() + t * V, flat.begin() + (t + 1) * V);
  return rows;
}

// max |a - b| / max |b|
double rel_max(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}
}  // namespace

TEST_CASE("KV-cache logits for a prompt and then one token at a time equal a full forward") {
  LlamaModel m(test_config(), cpu_device(0));
  test::init_scaled(m, 21, 10.0f);
  std::vector<int32_t> ids = random_tokens(kLen, m.config().vocab_size, 4);
  std::vector<std::vector<float>> ref = full_logits(m, ids);

  LlamaGenerator gen(m, kLen);
  std::vector<float> got = gen.feed({ids.begin(), ids.begin() + kPrompt});
  CHECK(gen.position() == kPrompt);
  CHECK(rel_max(got, ref[kPrompt - 1]) < 1e-4);
  for (int64_t t = kPrompt; t < kLen; ++t) {
    CAPTURE(t);
    got = gen.feed({ids[t]});
    CHECK(gen.position() == t + 1);
    CHECK(rel_max(got, ref[t]) < 1e-4);
  }

  // The reference is not trivial: a token's logits depend on what precedes it.
  LlamaGenerator alone(m, 1);
  std::vector<float> no_context = alone.feed({ids[kLen - 1]});
  CHECK(rel_max(no_context, ref[kLen - 1]) > 1e-2);
}

TEST_CASE("feeding the prompt in one call or token by token gives the same logits") {
  LlamaModel m(test_config(), cpu_device(0));
  test::init_scaled(m, 22, 10.0f);
  std::vector<int32_t> ids = random_tokens(kLen, m.config().vocab_size, 5);
  std::vector<std::vector<float>> ref = full_logits(m, ids);

  LlamaGenerator whole(m, kLen), single(m, kLen), mixed(m, kLen);
  std::vector<float> at_once = whole.feed(ids);
  CHECK(rel_max(at_once, ref[kLen - 1]) < 1e-4);
  std::vector<float> last;
  for (int64_t t = 0; t < kLen; ++t) {
    CAPTURE(t);
    last = single.feed({ids[t]});
    CHECK(rel_max(last, ref[t]) < 1e-4);
  }
  CHECK(rel_max(last, at_once) < 1e-4);
  // Uneven chunks: 3, 1, 6, 2.
  std::vector<float> chunked;
  for (auto [b, e] : {std::pair{0, 3}, {3, 4}, {4, 10}, {10, 12}}) {
    chunked = mixed.feed({ids.begin() + b, ids.begin() + e});
    CHECK(rel_max(chunked, ref[e - 1]) < 1e-4);
  }
}

TEST_CASE("the generator refuses feeds past max_len and bad token ids") {
  LlamaModel m(test_config(), cpu_device(0));
  m.init_random(1);
  CHECK_THROWS_AS(LlamaGenerator(m, 33), Error);  // past max_position_embeddings
  CHECK_THROWS_AS(LlamaGenerator(m, 0), Error);
  LlamaGenerator gen(m, 4);
  CHECK_THROWS_AS(gen.feed({}), Error);
  CHECK_THROWS_AS(gen.feed({259}), Error);
  CHECK_THROWS_AS(gen.feed({-1}), Error);
  CHECK(gen.position() == 0);  // refused feeds leave the cache as it was
  gen.feed({1, 2, 3});
  CHECK_THROWS_AS(gen.feed({4, 5}), Error);
  CHECK(gen.feed({4}).size() == 259);
  CHECK(gen.position() == 4);
  CHECK_THROWS_AS(gen.feed({5}), Error);
}

TEST_CASE("argmax picks the first of tied largest logits") {
  CHECK(argmax({0.5f, 2.0f, -1.0f, 2.0f}) == 1);
  CHECK(argmax({-3.0f}) == 0);
  CHECK(argmax({-2.0f, -1.0f}) == 1);
}

TEST_CASE("KV-cache logits equal a full forward under llama3 rope scaling") {
  // The cache path rotates each new token at its own position offset: with scaled
  // frequencies it must still agree with the full forward, and differ from plain RoPE.
  LlamaConfig c = test_config();
  c.rope_scaling = {ops::RopeScalingType::llama3, 8.0, 1.0, 4.0, 8};  // all three bands at D 32
  LlamaModel m(c, cpu_device(0));
  test::init_scaled(m, 22, 10.0f);
  std::vector<int32_t> ids = random_tokens(kLen, c.vocab_size, 5);
  std::vector<std::vector<float>> ref = full_logits(m, ids);
  LlamaGenerator gen(m, kLen);
  std::vector<float> got = gen.feed({ids.begin(), ids.begin() + kPrompt});
  CHECK(rel_max(got, ref[kPrompt - 1]) < 1e-4);
  for (int64_t t = kPrompt; t < kLen; ++t) {
    CAPTURE(t);
    CHECK(rel_max(gen.feed({ids[t]}), ref[t]) < 1e-4);
  }
  LlamaModel plain(test_config(), cpu_device(0));
  test::init_scaled(plain, 22, 10.0f);
  CHECK(rel_max(full_logits(plain, ids)[kLen - 1], ref[kLen - 1]) > 1e-3);
}
