// GPU: the fused classifier (Note [Fused classifier]) on cuda:0 against its CPU
// twin (loss, lse, and the in-place bf16 gradient), and against the unfused f32
// kernels on the same values; and the f32 -> bf16 backward of the unfused path.

#include <doctest/doctest.h>

#include <cmath>

#include "ops/cross_entropy.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
constexpr int32_t kIgnore = -100;
struct Case {
  int64_t N, V, ld;
};
// ld = V unaligned rows (the scalar path), padded rows (the vector path), one large.
const Case kCases[] = {{1, 1, 1},     {3, 5, 5},        {5, 33, 64},       {6, 259, 320},
                       {4, 300, 301}, {64, 8192, 8192}, {16, 50000, 50048}};

std::vector<int32_t> targets_for(int64_t N, int64_t V) {
  std::vector<int32_t> t = random_ids(static_cast<size_t>(N), 31, 0, static_cast<int32_t>(V - 1));
  for (int64_t n = 1; n < N; n += 3) t[n] = kIgnore;
  return t;
}

std::vector<double> padded(const std::vector<double>& x, int64_t N, int64_t V, int64_t ld) {
  std::vector<double> p(static_cast<size_t>(N * ld), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) p[n * ld + v] = x[n * V + v];
  return p;
}
}  // namespace

TEST_CASE("fused classifier on cuda:0 matches its CPU twin, forward and backward") {
  CpuAndCuda s;
  for (auto [N, V, ld] : kCases) {
    CAPTURE(N);
    CAPTURE(V);
    CAPTURE(ld);
    std::vector<double> x = bf16_rounded(random_vector(N * V, 41, -8, 8));
    std::vector<double> xp = padded(x, N, V, ld);
    Tensor lc = bf16_tensor(s.cpu, xp, {N * ld}), lg = bf16_tensor(s.gpu, xp, {N * ld});
    TensorPair t = i32_pair(s, targets_for(N, V), {N});
    TensorPair stats = f32_pair(s, {0, 0}, {2});
    TensorPair lse = f32_pair(s, std::vector<double>(N, 0.0), {N});
    ops::cross_entropy_fused_forward(s.cpu, stats.cpu, lse.cpu, lc, t.cpu, N, V, ld, kIgnore);
    ops::cross_entropy_fused_forward(s.gpu, stats.gpu, lse.gpu, lg, t.gpu, N, V, ld, kIgnore);
    check_cuda_matches_cpu(s, stats, 1e-5, 1e-5, "stats");
    check_cuda_matches_cpu(s, lse, 1e-6, 1e-6, "lse", false);
    // The unfused f32 kernel on the same values gives the same loss on the GPU too.
    TensorPair f32 = f32_pair(s, x, {N, V});
    TensorPair ref = f32_pair(s, {0, 0}, {2});
    ops::cross_entropy_forward(s.gpu, ref.gpu, f32.gpu, t.gpu, N, V, kIgnore);
    std::vector<double> a = f32_values(s.gpu, stats.gpu), b = f32_values(s.gpu, ref.gpu);
    CHECK(a[0] == doctest::Approx(b[0]).epsilon(1e-5));
    CHECK(a[1] == b[1]);

    const float normalizer = 7.0f;
    ops::cross_entropy_fused_backward(s.cpu, lc, lse.cpu, t.cpu, N, V, ld, kIgnore, normalizer);
    ops::cross_entropy_fused_backward(s.gpu, lg, lse.gpu, t.gpu, N, V, ld, kIgnore, normalizer);
    std::vector<double> want = bf16_values(s.cpu, lc), got = bf16_values(s.gpu, lg);
    std::string why;
    // Both round exp(x - lse) / normalizer once; expf and the CPU's vector exp may
    // differ in the last fp32 bits, which can move a rounding by one bf16 step.
    CHECK_MESSAGE(all_close(got, want, 2 * kBf16Rtol, 1e-7, &why), why);
    if (N > 1) CHECK(max_abs(want) > 0);
  }
}

TEST_CASE("unfused cross-entropy backward on cuda:0 writes a bf16 dlogits: the f32 one rounded") {
  CpuAndCuda s;
  const int64_t N = 9, V = 77;
  std::vector<double> x = random_vector(N * V, 51, -5, 5);
  TensorPair logits = f32_pair(s, x, {N, V});
  TensorPair t = i32_pair(s, targets_for(N, V), {N});
  Tensor dc = bf16_tensor(s.cpu, std::vector<double>(N * V, 1.0), {N, V});
  Tensor dg = bf16_tensor(s.gpu, std::vector<double>(N * V, 1.0), {N, V});
  ops::cross_entropy_backward(s.cpu, dc, logits.cpu, t.cpu, N, V, kIgnore, 5.0f);
  ops::cross_entropy_backward(s.gpu, dg, logits.gpu, t.gpu, N, V, kIgnore, 5.0f);
  std::vector<double> want = bf16_values(s.cpu, dc), got = bf16_values(s.gpu, dg);
  std::string why;
  CHECK_MESSAGE(all_close(got, want, 2 * kBf16Rtol, 1e-7, &why), why);
  CHECK(max_abs(want) > 0);
}
