// GPU: the vocabulary-parallel cross-entropy (Note [Vocabulary-parallel
// cross-entropy]) on cuda:0 against its CPU twin: every shard's part, the
// combined loss, count and lse, and the shard gradients (f32 out of place and in
// place, bf16), padding columns never read and written as 0; an empty shard; and
// the documented NaN for a target outside the vocabulary.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cross_entropy_parallel.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
constexpr int32_t kIgnore = -100;
struct Case {
  int64_t N, V, S;
};
// One shard; a last shard of padding alone (V = 9 over 4); non-multiples of the
// block; a Llama-sized vocabulary.
const Case kCases[] = {{1, 7, 1},     {13, 259, 3},   {7, 9, 4},
                       {37, 1000, 4}, {64, 32003, 4}, {40, 50000, 2}};

struct Shard {
  int64_t v0, cols;
};
std::vector<Shard> shards_of(int64_t V, int64_t S, int64_t ld) {
  std::vector<Shard> shards;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t v0 = std::min(s * ld, V);
    shards.push_back({v0, std::min(ld, V - v0)});
  }
  return shards;
}

// Random targets, every third row ignored, the first rows on shard boundaries.
std::vector<int32_t> targets_for(int64_t N, int64_t V, const std::vector<Shard>& shards) {
  std::vector<int32_t> t = random_ids(static_cast<size_t>(N), 61, 0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> edges;
  for (auto [v0, cols] : shards)
    if (cols > 0)
      edges.insert(edges.end(), {static_cast<int32_t>(v0), static_cast<int32_t>(v0 + cols - 1)});
  for (size_t i = 0; i < edges.size() && i < t.size(); ++i) t[i] = edges[i];
  for (int64_t n = 1; n < N; n += 3) t[n] = kIgnore;
  return t;
}

// Columns [v0, v0 + cols) of x (N, V) in rows ld wide, the padding NaN.
std::vector<double> shard_logits(const std::vector<double>& x, int64_t N, int64_t V, Shard sh,
                                 int64_t ld) {
  std::vector<double> y(N * ld, std::numeric_limits<double>::quiet_NaN());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < sh.cols; ++j) y[n * ld + j] = x[n * V + sh.v0 + j];
  return y;
}
}  // namespace

TEST_CASE("vocabulary-parallel cross-entropy on cuda:0 matches the CPU, parts to gradients") {
  CpuAndCuda s;
  for (auto [N, V, S] : kCases) {
    CAPTURE(N);
    CAPTURE(V);
    CAPTURE(S);
    const int64_t ld = (V + S - 1) / S;
    const std::vector<Shard> shards = shards_of(V, S, ld);
    const std::vector<int32_t> t = targets_for(N, V, shards);
    const std::vector<double> x = random_vector(N * V, 62, -5, 5);
    TensorPair tt = i32_pair(s, t, {N});

    // Forward per shard; the parts concatenated shard-major, each device its own.
    std::vector<TensorPair> logits;
    std::vector<double> parts_cpu, parts_gpu;
    for (Shard sh : shards) {
      CAPTURE(sh.v0);
      logits.push_back(f32_pair(s, shard_logits(x, N, V, sh, ld), {N, ld}));
      TensorPair part = f32_pair(s, std::vector<double>(N * 3, 42.0), {N * 3});
      ops::cross_entropy_shard_forward(s.cpu, part.cpu, logits.back().cpu, tt.cpu, N, sh.cols, ld,
                                       sh.v0, V, kIgnore);
      ops::cross_entropy_shard_forward(s.gpu, part.gpu, logits.back().gpu, tt.gpu, N, sh.cols, ld,
                                       sh.v0, V, kIgnore);
      std::vector<double> want = f32_values(s.cpu, part.cpu), got = f32_values(s.gpu, part.gpu);
      for (int64_t n = 0; n < N; ++n) {
        CAPTURE(n);
        CHECK(got[3 * n] == want[3 * n]);  // the max and the target logit are exact
        // The sum in double of expf against the CPU's 16 float lanes of its vector exp.
        CHECK(got[3 * n + 1] == doctest::Approx(want[3 * n + 1]).epsilon(1e-5));
        CHECK(got[3 * n + 2] == want[3 * n + 2]);
      }
      parts_cpu.insert(parts_cpu.end(), want.begin(), want.end());
      parts_gpu.insert(parts_gpu.end(), got.begin(), got.end());
    }
    TensorPair parts{f32_tensor(s.cpu, parts_cpu, {S * N * 3}),
                     f32_tensor(s.gpu, parts_gpu, {S * N * 3})};
    TensorPair stats = f32_pair(s, {-1.0, -1.0}, {2});
    TensorPair lse = f32_pair(s, std::vector<double>(N, 42.0), {N});
    ops::cross_entropy_shard_combine(s.cpu, stats.cpu, lse.cpu, parts.cpu, tt.cpu, N, S, kIgnore);
    ops::cross_entropy_shard_combine(s.gpu, stats.gpu, lse.gpu, parts.gpu, tt.gpu, N, S, kIgnore);
    check_cuda_matches_cpu(s, stats, 1e-5, 1e-6, "stats");
    check_cuda_matches_cpu(s, lse, 1e-6, 1e-5, "lse");

    // Backward per shard, from the CPU's lse on both sides.
    const float normalizer = static_cast<float>(std::max(1.0, f32_values(s.cpu, stats.cpu)[1]));
    Tensor lse_gpu = f32_tensor(s.gpu, f32_values(s.cpu, lse.cpu), {N});
    for (size_t k = 0; k < shards.size(); ++k) {
      const Shard sh = shards[k];
      CAPTURE(sh.v0);
      CAPTURE(sh.cols);
      TensorPair d = f32_pair(s, std::vector<double>(N * ld, 42.0), {N, ld});
      ops::cross_entropy_shard_backward(s.cpu, d.cpu, logits[k].cpu, lse.cpu, tt.cpu, N, sh.cols,
                                        ld, sh.v0, kIgnore, normalizer);
      ops::cross_entropy_shard_backward(s.gpu, d.gpu, logits[k].gpu, lse_gpu, tt.gpu, N, sh.cols,
                                        ld, sh.v0, kIgnore, normalizer);
      check_cuda_matches_cpu(s, d, 1e-5, 1e-6 / normalizer, "dlogits", sh.cols > 0 && V > 1);
      std::vector<double> got = f32_values(s.gpu, d.gpu);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = sh.cols; j < ld; ++j) CHECK(got[n * ld + j] == 0.0);

      Tensor c16 = bf16_tensor(s.cpu, std::vector<double>(N * ld, 1.0), {N, ld});
      Tensor g16 = bf16_tensor(s.gpu, std::vector<double>(N * ld, 1.0), {N, ld});
      ops::cross_entropy_shard_backward(s.cpu, c16, logits[k].cpu, lse.cpu, tt.cpu, N, sh.cols, ld,
                                        sh.v0, kIgnore, normalizer);
      ops::cross_entropy_shard_backward(s.gpu, g16, logits[k].gpu, lse_gpu, tt.gpu, N, sh.cols, ld,
                                        sh.v0, kIgnore, normalizer);
      std::vector<double> want16 = bf16_values(s.cpu, c16), got16 = bf16_values(s.gpu, g16);
      std::string why;
      // Both round the same f32 formula once; expf and the CPU's vector exp may
      // differ in the last fp32 bits, which can move a rounding by one bf16 step.
      CHECK_MESSAGE(all_close(got16, want16, 2 * kBf16Rtol, 1e-7, &why), why);

      // In place over the logits: the out-of-place result.
      ops::cross_entropy_shard_backward(s.gpu, logits[k].gpu, logits[k].gpu, lse_gpu, tt.gpu, N,
                                        sh.cols, ld, sh.v0, kIgnore, normalizer);
      CHECK(f32_values(s.gpu, logits[k].gpu) == got);
    }
  }
}

TEST_CASE(
    "vocabulary-parallel cross-entropy on cuda:0 turns a target outside the vocabulary into NaN") {
  CpuAndCuda s;
  const int64_t N = 3, V = 8, cols = 4, ld = 4;
  Tensor logits = f32_tensor(s.gpu, random_vector(N * ld, 63), {N, ld});
  Tensor targets = tensor_from_vector(s.gpu, std::vector<int32_t>{1, 8, kIgnore}, {N}, DType::i32,
                                      cuda_device(0));
  // The shard of ids [4, 8) does not hold id 8 either, but knows it is out of range.
  Tensor part = f32_tensor(s.gpu, std::vector<double>(N * 3, 42.0), {N * 3});
  ops::cross_entropy_shard_forward(s.gpu, part, logits, targets, N, cols, ld, 4, V, kIgnore);
  auto p = f32_values(s.gpu, part);
  CHECK(p[2] == 0.0);  // id 1 is another shard's
  CHECK(std::isnan(p[5]));
  CHECK(p[6] == 0.0);
  CHECK(p[8] == 0.0);  // the ignored row

  Tensor stats = f32_tensor(s.gpu, {0.0, 0.0}, {2});
  Tensor lse = f32_tensor(s.gpu, std::vector<double>(N, 0.0), {N});
  ops::cross_entropy_shard_combine(s.gpu, stats, lse, part, targets, N, 1, kIgnore);
  auto st = f32_values(s.gpu, stats);
  CHECK(std::isnan(st[0]));
  CHECK(st[1] == 2.0);

  // A negative target (not ignore_index) makes the row's gradient NaN.
  Tensor negative = tensor_from_vector(s.gpu, std::vector<int32_t>{5, -3, kIgnore}, {N}, DType::i32,
                                       cuda_device(0));
  Tensor d = f32_tensor(s.gpu, std::vector<double>(N * ld, 0.0), {N, ld});
  ops::cross_entropy_shard_backward(s.gpu, d, logits, lse, negative, N, cols, ld, 4, kIgnore, 2.0f);
  auto g = f32_values(s.gpu, d);
  for (int64_t j = 0; j < ld; ++j) {
    CHECK(std::isfinite(g[j]));
    CHECK(std::isnan(g[ld + j]));
    CHECK(g[2 * ld + j] == 0.0);
  }
}
