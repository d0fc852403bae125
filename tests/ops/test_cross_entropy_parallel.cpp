// Vocabulary-parallel cross-entropy (Note [Vocabulary-parallel cross-entropy]): the
// logits split over S shards of ceil(V / S) columns, the last one partly or wholly
// padding (filled with garbage that must never be read), give the whole-vocabulary
// kernels' loss, count and gradient; lse against a double formula; targets on
// every shard boundary, ignored rows, an all-ignored batch, an empty shard, the
// bf16 gradient as the f32 one rounded once, and bad targets.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "engine/core/check.h"
#include "ops/cross_entropy.h"
#include "ops/cross_entropy_parallel.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
constexpr int32_t kIgnore = -100;

// Shard s of S holds vocabulary ids [v0, v0 + cols) in rows ld = ceil(V / S) wide.
struct Shard {
  int64_t v0, cols;
};
int64_t shard_width(int64_t V, int64_t S) {
  return (V + S - 1) / S;
}
std::vector<Shard> shards_of(int64_t V, int64_t S) {
  std::vector<Shard> shards;
  const int64_t ld = shard_width(V, S);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t v0 = std::min(s * ld, V);
    shards.push_back({v0, std::min(ld, V - v0)});
  }
  return shards;
}

// Both ends of every non-empty shard, then random ids; every third row (from row
// 1) ignored.
std::vector<int32_t> boundary_targets(int64_t V, int64_t S, int64_t extra, uint64_t seed) {
  std::vector<int32_t> ids;
  for (auto [v0, cols] : shards_of(V, S))
    if (cols > 0)
      ids.insert(ids.end(), {static_cast<int32_t>(v0), static_cast<int32_t>(v0 + cols - 1)});
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
  for (int64_t i = 0; i < extra; ++i) ids.push_back(dist(rng));
  std::vector<int32_t> t;
  for (int32_t id : ids) {
    if (t.size() % 3 == 1) t.push_back(kIgnore);
    t.push_back(id);
  }
  return t;
}

// Shard columns [v0, v0 + cols) of x (N, V) in rows ld wide; the padding columns
// hold NaN on even rows and 1e30 on odd ones: a kernel that reads them is wrong.
std::vector<double> shard_logits(const std::vector<double>& x, int64_t N, int64_t V, Shard sh,
                                 int64_t ld) {
  std::vector<double> y(N * ld);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < ld; ++j)
      y[n * ld + j] = j < sh.cols  ? x[n * V + sh.v0 + j]
                      : n % 2 == 0 ? std::numeric_limits<double>::quiet_NaN()
                                   : 1e30;
  return y;
}

// log sum_v exp(x[n, v]) in double, of x as f32 holds it.
double lse_double(const std::vector<double>& x, int64_t n, int64_t V) {
  double m = -std::numeric_limits<double>::infinity(), s = 0;
  for (int64_t v = 0; v < V; ++v)
    m = std::max(m, static_cast<double>(static_cast<float>(x[n * V + v])));
  for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<float>(x[n * V + v]) - m);
  return m + std::log(s);
}

Tensor i32_tensor(Stream& s, const std::vector<int32_t>& values) {
  return tensor_from_vector(s, values, {static_cast<int64_t>(values.size())}, DType::i32,
                            s.device());
}

// Every shard's part, shard-major, as combine takes them.
Tensor all_parts(Stream& s, const std::vector<double>& x, const Tensor& targets, int64_t N,
                 int64_t V, int64_t S) {
  const int64_t ld = shard_width(V, S);
  std::vector<double> parts;
  for (Shard sh : shards_of(V, S)) {
    Tensor logits = f32_tensor(s, shard_logits(x, N, V, sh, ld), {N, ld});
    Tensor part = f32_tensor(s, std::vector<double>(N * 3, 42.0), {N * 3});
    ops::cross_entropy_shard_forward(s, part, logits, targets, N, sh.cols, ld, sh.v0, V, kIgnore);
    std::vector<double> p = f32_values(s, part);
    parts.insert(parts.end(), p.begin(), p.end());
  }
  return f32_tensor(s, parts, {S * N * 3});
}
}  // namespace

TEST_CASE("vocabulary-parallel cross-entropy over S shards equals the whole-vocabulary loss") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t V : {259, 37, 9}) {
    for (int64_t S : {1, 2, 3, 4}) {
      CAPTURE(V);
      CAPTURE(S);
      std::vector<int32_t> t = boundary_targets(V, S, 7, 1);
      const int64_t N = static_cast<int64_t>(t.size());
      std::vector<double> x = random_vector(N * V, 2, -4, 4);
      Tensor tt = i32_tensor(s, t);
      Tensor ref = Tensor::empty({2}, DType::f32, cpu_device(0));
      ops::cross_entropy_forward(s, ref, f32_tensor(s, x, {N, V}), tt, N, V, kIgnore);

      Tensor stats = f32_tensor(s, {42, 42}, {2});
      Tensor lse = f32_tensor(s, std::vector<double>(N, 42.0), {N});
      ops::cross_entropy_shard_combine(s, stats, lse, all_parts(s, x, tt, N, V, S), tt, N, S,
                                       kIgnore);
      std::vector<double> want = f32_values(s, ref), got = f32_values(s, stats);
      REQUIRE(want[0] > 1.0);
      CHECK(got[0] == doctest::Approx(want[0]).epsilon(1e-5));
      CHECK(got[1] == want[1]);
      std::vector<double> l = f32_values(s, lse), lse_ref(N, 0.0);
      for (int64_t n = 0; n < N; ++n)
        if (t[n] != kIgnore) lse_ref[n] = lse_double(x, n, V);
      std::string why;
      CHECK_MESSAGE(all_close(l, lse_ref, 1e-6, 1e-6, &why), why);
      for (int64_t n = 0; n < N; ++n)
        if (t[n] == kIgnore) CHECK(l[n] == 0.0);
    }
  }
}

TEST_CASE("vocabulary-parallel cross-entropy backward equals the columns of the whole gradient") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t V : {259, 37, 9}) {
    for (int64_t S : {1, 2, 3, 4}) {
      CAPTURE(V);
      CAPTURE(S);
      std::vector<int32_t> t = boundary_targets(V, S, 5, 3);
      const int64_t N = static_cast<int64_t>(t.size());
      std::vector<double> x = random_vector(N * V, 4, -4, 4);
      Tensor tt = i32_tensor(s, t);
      const float normalizer = 7.5f;  // a global count: not this batch's own
      Tensor whole = Tensor::empty({N, V}, DType::f32, cpu_device(0));
      ops::cross_entropy_backward(s, whole, f32_tensor(s, x, {N, V}), tt, N, V, kIgnore,
                                  normalizer);
      std::vector<double> g = f32_values(s, whole);
      REQUIRE(max_abs(g) > 1e-3);

      Tensor stats = Tensor::empty({2}, DType::f32, cpu_device(0));
      Tensor lse = Tensor::empty({N}, DType::f32, cpu_device(0));
      ops::cross_entropy_shard_combine(s, stats, lse, all_parts(s, x, tt, N, V, S), tt, N, S,
                                       kIgnore);
      const int64_t ld = shard_width(V, S);
      for (Shard sh : shards_of(V, S)) {
        CAPTURE(sh.v0);
        CAPTURE(sh.cols);
        Tensor logits = f32_tensor(s, shard_logits(x, N, V, sh, ld), {N, ld});
        Tensor d = f32_tensor(s, std::vector<double>(N * ld, 123.0), {N, ld});  // overwritten
        ops::cross_entropy_shard_backward(s, d, logits, lse, tt, N, sh.cols, ld, sh.v0, kIgnore,
                                          normalizer);
        std::vector<double> got = f32_values(s, d), want, padding;
        std::vector<double> got_cols;
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t j = 0; j < ld; ++j) {
            if (j < sh.cols) {
              got_cols.push_back(got[n * ld + j]);
              want.push_back(g[n * V + sh.v0 + j]);
            } else {
              padding.push_back(got[n * ld + j]);
            }
          }
        }
        // Each is within about 4e-7 of the exact gradient (f32 lse and exp against the
        // f32 max, sum and exp), relative: 1e-6 apart at most.
        std::string why;
        CHECK_MESSAGE(all_close(got_cols, want, 1e-6, 1e-9, &why), why);
        CHECK(padding == std::vector<double>(padding.size(), 0.0));
        for (int64_t n = 0; n < N; ++n)
          if (t[n] == kIgnore)
            for (int64_t j = 0; j < ld; ++j) CHECK(got[n * ld + j] == 0.0);

        // In place over the logits: the same values.
        ops::cross_entropy_shard_backward(s, logits, logits, lse, tt, N, sh.cols, ld, sh.v0,
                                          kIgnore, normalizer);
        CHECK(f32_values(s, logits) == got);
      }
    }
  }
}

TEST_CASE("vocabulary-parallel cross-entropy backward to bf16 is the f32 gradient rounded once") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t V = 259, S = 3, ld = shard_width(V, S);
  std::vector<int32_t> t = boundary_targets(V, S, 1000, 5);
  const int64_t N = static_cast<int64_t>(t.size());
  std::vector<double> x = random_vector(N * V, 6, -8, 8);
  Tensor tt = i32_tensor(s, t);
  Tensor stats = Tensor::empty({2}, DType::f32, cpu_device(0));
  Tensor lse = Tensor::empty({N}, DType::f32, cpu_device(0));
  ops::cross_entropy_shard_combine(s, stats, lse, all_parts(s, x, tt, N, V, S), tt, N, S, kIgnore);
  for (Shard sh : shards_of(V, S)) {
    CAPTURE(sh.v0);
    Tensor logits = f32_tensor(s, shard_logits(x, N, V, sh, ld), {N, ld});
    Tensor d32 = Tensor::empty({N, ld}, DType::f32, cpu_device(0));
    Tensor d16 = bf16_tensor(s, std::vector<double>(N * ld, 1.0), {N, ld});
    ops::cross_entropy_shard_backward(s, d32, logits, lse, tt, N, sh.cols, ld, sh.v0, kIgnore,
                                      700.0f);
    ops::cross_entropy_shard_backward(s, d16, logits, lse, tt, N, sh.cols, ld, sh.v0, kIgnore,
                                      700.0f);
    std::vector<double> ref = f32_values(s, d32);
    REQUIRE(max_abs(ref) > 1e-4);
    std::vector<uint16_t> expected;
    for (double v : ref) expected.push_back(float_to_bf16(static_cast<float>(v)));
    CHECK(bf16_bits(s, d16) == expected);
  }
}

TEST_CASE(
    "vocabulary-parallel cross-entropy with every row ignored gives zero loss and gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 4, V = 37, S = 2, ld = shard_width(V, S);
  std::vector<double> x = random_vector(N * V, 7, -4, 4);
  Tensor tt = i32_tensor(s, std::vector<int32_t>(N, kIgnore));
  Tensor parts = all_parts(s, x, tt, N, V, S);
  CHECK(f32_values(s, parts) == std::vector<double>(S * N * 3, 0.0));  // {0, 0, 0} a row
  Tensor stats = f32_tensor(s, {42, 42}, {2});
  Tensor lse = f32_tensor(s, std::vector<double>(N, 42.0), {N});
  ops::cross_entropy_shard_combine(s, stats, lse, parts, tt, N, S, kIgnore);
  CHECK(f32_values(s, stats) == std::vector<double>{0, 0});
  CHECK(f32_values(s, lse) == std::vector<double>(N, 0.0));
  for (Shard sh : shards_of(V, S)) {
    Tensor logits = f32_tensor(s, shard_logits(x, N, V, sh, ld), {N, ld});
    Tensor d = f32_tensor(s, std::vector<double>(N * ld, 42.0), {N, ld});
    ops::cross_entropy_shard_backward(s, d, logits, lse, tt, N, sh.cols, ld, sh.v0, kIgnore, 1.0f);
    CHECK(f32_values(s, d) == std::vector<double>(N * ld, 0.0));
  }
}

TEST_CASE("a vocabulary shard with no columns reports an empty part and changes nothing") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 5, V = 33, ld = 4;
  std::vector<double> x = random_vector(N * V, 8, -4, 4);
  std::vector<int32_t> t = {0, 32, kIgnore, 17, 5};
  Tensor tt = i32_tensor(s, t);
  Tensor logits = f32_tensor(s, x, {N, V});
  Tensor empty_logits = f32_tensor(s, std::vector<double>(N * ld, 1e30), {N, ld});  // all padding
  Tensor whole = Tensor::empty({N * 3}, DType::f32, cpu_device(0));
  Tensor none = Tensor::empty({N * 3}, DType::f32, cpu_device(0));
  ops::cross_entropy_shard_forward(s, whole, logits, tt, N, V, V, 0, V, kIgnore);
  ops::cross_entropy_shard_forward(s, none, empty_logits, tt, N, 0, ld, V, V, kIgnore);
  std::vector<double> p = f32_values(s, none);
  for (int64_t n = 0; n < N; ++n) {
    CAPTURE(n);
    if (t[n] == kIgnore) continue;
    CHECK(p[3 * n] == -std::numeric_limits<double>::infinity());
    CHECK(p[3 * n + 1] == 0.0);
    CHECK(p[3 * n + 2] == 0.0);
  }
  // The whole vocabulary on one shard, with and without an empty second shard.
  std::vector<double> w = f32_values(s, whole), both = w;
  both.insert(both.end(), p.begin(), p.end());
  Tensor stats1 = Tensor::empty({2}, DType::f32, cpu_device(0));
  Tensor lse1 = Tensor::empty({N}, DType::f32, cpu_device(0));
  Tensor stats2 = Tensor::empty({2}, DType::f32, cpu_device(0));
  Tensor lse2 = Tensor::empty({N}, DType::f32, cpu_device(0));
  ops::cross_entropy_shard_combine(s, stats1, lse1, f32_tensor(s, w, {N * 3}), tt, N, 1, kIgnore);
  ops::cross_entropy_shard_combine(s, stats2, lse2, f32_tensor(s, both, {2 * N * 3}), tt, N, 2,
                                   kIgnore);
  CHECK(f32_values(s, stats1)[0] > 1.0);
  CHECK(f32_values(s, stats2) == f32_values(s, stats1));
  CHECK(f32_values(s, lse2) == f32_values(s, lse1));
  // Its gradient block is all padding: zeros.
  Tensor d = f32_tensor(s, std::vector<double>(N * ld, 42.0), {N, ld});
  ops::cross_entropy_shard_backward(s, d, empty_logits, lse1, tt, N, 0, ld, V, kIgnore, 2.0f);
  CHECK(f32_values(s, d) == std::vector<double>(N * ld, 0.0));
}

TEST_CASE("vocabulary-parallel cross-entropy rejects a target outside the vocabulary") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 3, V = 259, cols = 100, ld = 104;
  Tensor logits = f32_tensor(s, random_vector(N * ld, 9, -4, 4), {N, ld});
  Tensor part = Tensor::empty({N * 3}, DType::f32, cpu_device(0));
  Tensor lse = f32_tensor(s, {5, 5, 5}, {N});
  Tensor d = Tensor::empty({N, ld}, DType::f32, cpu_device(0));
  // Every shard checks, the one that does not hold the bad id too.
  Tensor high = i32_tensor(s, {5, 300, kIgnore});
  ops::cross_entropy_shard_forward(s, part, logits, high, N, cols, ld, 0, V, kIgnore);
  std::string msg = error_message([&] { s.synchronize(); });
  CAPTURE(msg);
  CHECK(msg.find("target id 300 is out of range for vocabulary size 259") != std::string::npos);

  // -1 is a bad target when ignore_index is -100, and a skipped row when it is -1.
  Tensor minus_one = i32_tensor(s, {5, -1, 0});
  ops::cross_entropy_shard_forward(s, part, logits, minus_one, N, cols, ld, 100, V, kIgnore);
  CHECK(error_message([&] { s.synchronize(); }).find("target id -1") != std::string::npos);
  ops::cross_entropy_shard_backward(s, d, logits, lse, minus_one, N, cols, ld, 0, kIgnore, 1.0f);
  CHECK(error_message([&] { s.synchronize(); }).find("target id -1 is negative") !=
        std::string::npos);
  ops::cross_entropy_shard_forward(s, part, logits, minus_one, N, cols, ld, 0, V, -1);
  std::vector<double> p = f32_values(s, part);  // the stream works again after the error
  CHECK(p[2] == f32_values(s, logits)[5]);
  CHECK(p[3 + 1] == 0.0);  // the ignored row
}
