// The fused classifier (Note [Fused classifier], ops/cross_entropy.h) on CPU
// devices: forward's loss and lse against the double formula on the bf16 logits,
// and equal to the unfused f32 cross-entropy of the same values; backward in place
// against the double gradient rounded once, ignored rows zero, padding columns
// untouched; bad arguments refused.

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>

#include "engine/core/check.h"
#include "ops/cross_entropy.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
constexpr int32_t kIgnore = -100;
constexpr uint16_t kSentinel = 0x7f7f;  // a bf16 no kernel writes by accident

struct Case {
  int64_t N, V, ld;
};
const Case kCases[] = {{1, 1, 1}, {1, 7, 64}, {3, 5, 5}, {5, 33, 64}, {6, 259, 320}, {4, 300, 301}};

std::vector<int32_t> targets_for(int64_t N, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, V - 1);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = n % 3 == 1 ? kIgnore : static_cast<int32_t>(dist(rng));
  return t;
}

Tensor i32_tensor(Stream& s, const std::vector<int32_t>& values) {
  return tensor_from_vector(s, values, {static_cast<int64_t>(values.size())}, DType::i32,
                            s.device());
}

// (N, ld) bf16 bits: row n's first V entries from `x` (N * V values), the padding
// columns the sentinel.
std::vector<uint16_t> padded_bits(const std::vector<double>& x, int64_t N, int64_t V, int64_t ld) {
  std::vector<uint16_t> bits(static_cast<size_t>(N * ld), kSentinel);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v)
      bits[n * ld + v] = float_to_bf16(static_cast<float>(x[n * V + v]));
  return bits;
}

// lse of row n of the bf16 values, in double.
double lse_double(const std::vector<double>& xb, int64_t n, int64_t V) {
  double m = -INFINITY, s = 0;
  for (int64_t v = 0; v < V; ++v) m = std::max(m, xb[n * V + v]);
  for (int64_t v = 0; v < V; ++v) s += std::exp(xb[n * V + v] - m);
  return m + std::log(s);
}
}  // namespace

TEST_CASE("fused classifier forward: loss sum, count and lse of the bf16 logits, rows ld apart") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, V, ld] : kCases) {
    CAPTURE(N);
    CAPTURE(V);
    CAPTURE(ld);
    std::vector<double> xb = bf16_rounded(random_vector(N * V, 11, -6, 6));
    std::vector<int32_t> t = targets_for(N, V, 12);
    Tensor logits =
        tensor_from_vector(s, padded_bits(xb, N, V, ld), {N * ld}, DType::bf16, s.device());
    Tensor stats = f32_tensor(s, {-1, -1}, {2});
    Tensor lse = f32_tensor(s, random_vector(N, 13), {N});
    ops::cross_entropy_fused_forward(s, stats, lse, logits, i32_tensor(s, t), N, V, ld, kIgnore);
    std::vector<double> got = f32_values(s, stats), got_lse = f32_values(s, lse);
    double sum = 0, count = 0;
    for (int64_t n = 0; n < N; ++n) {
      if (t[n] == kIgnore) {
        CHECK(got_lse[n] == 0.0);
        continue;
      }
      const double l = lse_double(xb, n, V);
      CHECK(got_lse[n] == doctest::Approx(l).epsilon(1e-6));
      sum += l - xb[n * V + t[n]];
      count += 1;
    }
    CHECK(got[1] == count);
    CHECK(got[0] == doctest::Approx(sum).epsilon(1e-6));
    // The unfused f32 kernel on the same values: the same loss.
    Tensor f32 = f32_tensor(s, xb, {N, V});
    Tensor stats_f32 = f32_tensor(s, {0, 0}, {2});
    ops::cross_entropy_forward(s, stats_f32, f32, i32_tensor(s, t), N, V, kIgnore);
    std::vector<double> ref = f32_values(s, stats_f32);
    CHECK(got[0] == doctest::Approx(ref[0]).epsilon(1e-6));
    CHECK(got[1] == ref[1]);
  }
}

TEST_CASE("fused classifier backward: the gradient in place, rounded once, padding untouched") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, V, ld] : kCases) {
    CAPTURE(N);
    CAPTURE(V);
    CAPTURE(ld);
    std::vector<double> xb = bf16_rounded(random_vector(N * V, 21, -6, 6));
    std::vector<int32_t> t = targets_for(N, V, 22);
    const float normalizer = 3.0f;
    Tensor logits =
        tensor_from_vector(s, padded_bits(xb, N, V, ld), {N * ld}, DType::bf16, s.device());
    Tensor stats = f32_tensor(s, {0, 0}, {2}), lse = f32_tensor(s, std::vector<double>(N, 0), {N});
    Tensor targets = i32_tensor(s, t);
    ops::cross_entropy_fused_forward(s, stats, lse, logits, targets, N, V, ld, kIgnore);
    ops::cross_entropy_fused_backward(s, logits, lse, targets, N, V, ld, kIgnore, normalizer);
    std::vector<uint16_t> bits = bf16_bits(s, logits);
    double nonzero = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t v = V; v < ld; ++v) CHECK(bits[n * ld + v] == kSentinel);
      const double l = t[n] == kIgnore ? 0 : lse_double(xb, n, V);
      for (int64_t v = 0; v < V; ++v) {
        const double got = bf16_to_float(bits[n * ld + v]);
        if (t[n] == kIgnore) {
          CHECK(bits[n * ld + v] == 0);
          continue;
        }
        const double want = (std::exp(xb[n * V + v] - l) - (v == t[n])) / normalizer;
        CHECK(std::fabs(got - want) <= 1e-6 + kBf16Rtol * std::fabs(want));
        nonzero = std::max(nonzero, std::fabs(want));
      }
    }
    if (N > 1) CHECK(nonzero > 0);
  }
}

TEST_CASE("fused classifier refuses bad targets and bad shapes in one line") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 2, V = 5, ld = 8;
  Tensor logits =
      tensor_from_vector(s, std::vector<uint16_t>(N * ld, 0), {N * ld}, DType::bf16, s.device());
  Tensor stats = f32_tensor(s, {0, 0}, {2}), lse = f32_tensor(s, {0, 0}, {2});
  std::string m = error_message([&] {
    ops::cross_entropy_fused_forward(s, stats, lse, logits, i32_tensor(s, {0, 5}), N, V, ld,
                                     kIgnore);
    s.synchronize();
  });
  CHECK(m.find("target id 5 is out of range for vocabulary size 5") != std::string::npos);
  m = error_message([&] {
    ops::cross_entropy_fused_forward(s, stats, lse, logits, i32_tensor(s, {0, 1}), N, V, V - 1,
                                     kIgnore);
  });
  CHECK(m.find("ld >= V") != std::string::npos);
  m = error_message([&] {
    ops::cross_entropy_fused_backward(s, logits, lse, i32_tensor(s, {0, 1}), N, V, ld, kIgnore,
                                      0.0f);
  });
  CHECK(m.find("normalizer must be positive") != std::string::npos);
}
