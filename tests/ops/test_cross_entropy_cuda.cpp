// GPU: cross-entropy forward (loss sum, count) and backward (out of place and in
// place over the logits) on cuda:0 against the CPU dispatcher, with ignored rows,
// and the documented NaN for a target outside the vocabulary.

#include <doctest/doctest.h>

#include <cmath>

#include "ops/cross_entropy.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
constexpr int32_t kIgnore = -100;
struct CrossEntropySizes {
  int64_t N, V;
};
const CrossEntropySizes kCrossEntropySizes[] = {{1, 1}, {1, 7}, {5, 61}, {37, 1000}, {256, 32003}};

// Random targets, every third row ignored (none when N == 1).
std::vector<int32_t> targets_for(int64_t N, int64_t V) {
  std::vector<int32_t> t = random_ids(N, 7, 0, static_cast<int32_t>(V - 1));
  for (int64_t n = 1; n < N; n += 3) t[n] = kIgnore;
  return t;
}
}  // namespace

TEST_CASE("cross-entropy forward and backward on cuda:0 match the CPU, in place too") {
  CpuAndCuda s;
  for (auto [N, V] : kCrossEntropySizes) {
    for (bool in_place : {false, true}) {
      CAPTURE(N);
      CAPTURE(V);
      CAPTURE(in_place);
      std::vector<int32_t> t = targets_for(N, V);
      TensorPair targets = i32_pair(s, t, {N});
      TensorPair logits = f32_pair(s, random_vector(N * V, 1, -5, 5), {N, V});
      TensorPair stats = f32_pair(s, {-1.0, -1.0}, {2});
      ops::cross_entropy_forward(s.cpu, stats.cpu, logits.cpu, targets.cpu, N, V, kIgnore);
      ops::cross_entropy_forward(s.gpu, stats.gpu, logits.gpu, targets.gpu, N, V, kIgnore);
      auto ref = f32_values(s.cpu, stats.cpu);
      auto got = f32_values(s.gpu, stats.gpu);
      CHECK(got[1] == ref[1]);
      if (V > 1) CHECK(ref[0] > 0);
      CHECK(std::abs(got[0] - ref[0]) <= 1e-5 * std::abs(ref[0]) + 1e-6);

      const float normalizer = static_cast<float>(ref[1] > 0 ? ref[1] : 1.0);
      TensorPair dlogits = in_place ? logits : f32_pair(s, random_vector(N * V, 2), {N, V});
      ops::cross_entropy_backward(s.cpu, dlogits.cpu, logits.cpu, targets.cpu, N, V, kIgnore,
                                  normalizer);
      ops::cross_entropy_backward(s.gpu, dlogits.gpu, logits.gpu, targets.gpu, N, V, kIgnore,
                                  normalizer);
      // Probabilities are ~1/V; the absolute tolerance follows the gradient's scale.
      check_cuda_matches_cpu(s, dlogits, 1e-5, 1e-6 / normalizer, "dlogits", V > 1);
    }
  }
}

TEST_CASE("cross-entropy on cuda:0 of zero rows writes a zero loss and count") {
  CpuAndCuda s;
  Tensor stats = f32_tensor(s.gpu, {5.0, 5.0}, {2});
  Tensor logits = f32_tensor(s.gpu, {0.0}, {1});
  Tensor targets =
      tensor_from_vector(s.gpu, std::vector<int32_t>{0}, {1}, DType::i32, cuda_device(0));
  ops::cross_entropy_forward(s.gpu, stats, logits, targets, 0, 3, kIgnore);
  CHECK(f32_values(s.gpu, stats) == std::vector<double>{0.0, 0.0});
}

TEST_CASE("cross-entropy on cuda:0 turns a target outside the vocabulary into NaN") {
  CpuAndCuda s;
  const int64_t N = 3, V = 4;
  Tensor logits = f32_tensor(s.gpu, random_vector(N * V, 3), {N, V});
  Tensor targets = tensor_from_vector(s.gpu, std::vector<int32_t>{1, 4, kIgnore}, {N}, DType::i32,
                                      cuda_device(0));
  Tensor stats = f32_tensor(s.gpu, {0.0, 0.0}, {2});
  ops::cross_entropy_forward(s.gpu, stats, logits, targets, N, V, kIgnore);
  auto st = f32_values(s.gpu, stats);
  CHECK(std::isnan(st[0]));
  CHECK(st[1] == 2.0);
  Tensor dlogits = f32_tensor(s.gpu, std::vector<double>(N * V, 0.0), {N, V});
  ops::cross_entropy_backward(s.gpu, dlogits, logits, targets, N, V, kIgnore, 2.0f);
  auto d = f32_values(s.gpu, dlogits);
  for (int64_t v = 0; v < V; ++v) {
    CHECK(std::isfinite(d[v]));
    CHECK(std::isnan(d[V + v]));
    CHECK(d[2 * V + v] == 0.0);
  }
}
