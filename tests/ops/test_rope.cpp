// RoPE: forward against the direct double formula and HF's rotate_half form,
// position offsets against slicing a longer sequence, backward against central
// finite differences (all in double), and the f32 dispatch (in place) against double.
// bf16 rows (the bf16 contract) against the fp32 twin on the same values. Strided
// rows (the fused q/k/v layout) against contiguous ones.

#include <doctest/doctest.h>

#include <cmath>

#include "engine/core/check.h"
#include "ops/cpu/rope.h"
#include "ops/rope.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"
#include "tests/ops/strided_ops_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct Sizes {
  int64_t B, T, H, D;
};
const Sizes kSizes[] = {{1, 1, 1, 2}, {2, 5, 4, 6}, {1, 7, 3, 8}, {3, 4, 2, 2}, {2, 33, 2, 64}};
constexpr double kTheta = 10000.0;

std::vector<double> forward_double(const std::vector<double>& x, Sizes s, double theta,
                                   int64_t pos_offset) {
  std::vector<double> y(x.size());
  ops::cpu::rope_forward<double>(y.data(), x.data(), s.B, s.T, s.H, s.D, theta, pos_offset);
  return y;
}
}  // namespace

TEST_CASE("rope forward matches the direct double formula") {
  for (Sizes s : kSizes) {
    for (int64_t pos_offset : {0, 3, 1000}) {
      CAPTURE(s.B);
      CAPTURE(s.T);
      CAPTURE(s.H);
      CAPTURE(s.D);
      CAPTURE(pos_offset);
      auto x = random_vector(s.B * s.T * s.H * s.D, 1, -2, 2);
      std::vector<double> expected(x.size());
      int64_t half = s.D / 2;
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < s.T; ++t)
          for (int64_t h = 0; h < s.H; ++h)
            for (int64_t i = 0; i < half; ++i) {
              int64_t base = ((b * s.T + t) * s.H + h) * s.D;
              double angle = (pos_offset + t) / std::pow(kTheta, 2.0 * i / s.D);
              double x1 = x[base + i], x2 = x[base + i + half];
              expected[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
              expected[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
            }
      REQUIRE(max_abs(expected) > 0.1);
      std::string why;
      CHECK_MESSAGE(
          all_close(forward_double(x, s, kTheta, pos_offset), expected, 1e-12, 1e-12, &why), why);
    }
  }
}

TEST_CASE("rope forward matches HF rotate_half on a hand-worked case") {
  // HF: emb = cat(freqs, freqs); out = x * cos(emb) + rotate_half(x) * sin(emb) with
  // rotate_half(x) = cat(-x2, x1). One token row of D = 4 at positions 0..2.
  Sizes s{1, 3, 1, 4};
  std::vector<double> x = {1, 2, 3, 4, -1, 0.5, 2, -3, 0.25, -2, 1, 1.5};
  std::vector<double> expected(x.size());
  for (int64_t t = 0; t < s.T; ++t) {
    const double* xt = x.data() + t * s.D;
    double inv_freq[2] = {1.0, 1.0 / 100.0};  // 1/10000^(0/4), 1/10000^(2/4)
    double emb[4] = {t * inv_freq[0], t * inv_freq[1], t * inv_freq[0], t * inv_freq[1]};
    double rot[4] = {-xt[2], -xt[3], xt[0], xt[1]};
    for (int64_t d = 0; d < s.D; ++d)
      expected[t * s.D + d] = xt[d] * std::cos(emb[d]) + rot[d] * std::sin(emb[d]);
  }
  // Position 0 is the identity.
  for (int64_t d = 0; d < s.D; ++d) CHECK(expected[d] == x[d]);
  std::string why;
  CHECK_MESSAGE(all_close(forward_double(x, s, kTheta, 0), expected, 1e-14, 1e-14, &why), why);
}

TEST_CASE("rope at pos_offset equals the same rows of a longer sequence") {
  Sizes full{2, 11, 3, 8};
  auto x = random_vector(full.B * full.T * full.H * full.D, 2, -2, 2);
  auto y_full = forward_double(x, full, kTheta, 0);
  for (int64_t p : {1, 4, 10}) {
    CAPTURE(p);
    Sizes tail{full.B, full.T - p, full.H, full.D};
    int64_t row = full.H * full.D;  // elements per token
    std::vector<double> x_tail, y_expected;
    for (int64_t b = 0; b < full.B; ++b) {
      auto begin = (b * full.T + p) * row, end = (b + 1) * full.T * row;
      x_tail.insert(x_tail.end(), x.begin() + begin, x.begin() + end);
      y_expected.insert(y_expected.end(), y_full.begin() + begin, y_full.begin() + end);
    }
    std::string why;
    CHECK_MESSAGE(
        all_close(forward_double(x_tail, tail, kTheta, p), y_expected, 1e-14, 1e-14, &why), why);
  }
}

TEST_CASE("rope backward matches central finite differences") {
  for (Sizes s : kSizes) {
    if (s.B * s.T * s.H * s.D > 1000) continue;  // finite differences are quadratic
    CAPTURE(s.B);
    CAPTURE(s.T);
    CAPTURE(s.H);
    CAPTURE(s.D);
    int64_t pos_offset = 5;
    auto x = random_vector(s.B * s.T * s.H * s.D, 3, -2, 2);
    auto dy = random_vector(x.size(), 4);
    std::vector<double> dx(x.size(), 123.0);  // overwritten
    ops::cpu::rope_backward<double>(dx.data(), dy.data(), s.B, s.T, s.H, s.D, kTheta, pos_offset);
    auto gx = numeric_grad(
        [&](const std::vector<double>& v) {
          return dot(forward_double(v, s, kTheta, pos_offset), dy);
        },
        x);
    REQUIRE(max_abs(gx) > 0.1);
    std::string why;
    CHECK_MESSAGE(all_close(dx, gx, 1e-6, 1e-8, &why), why);
  }
}

TEST_CASE("rope f32 dispatch on a CPU device works in place and agrees with double") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Sizes sz{2, 9, 4, 16};
  int64_t pos_offset = 7;
  int64_t n = sz.B * sz.T * sz.H * sz.D;
  auto x = random_vector(n, 5, -2, 2);
  auto dy = random_vector(n, 6);
  auto y = forward_double(x, sz, kTheta, pos_offset);
  std::vector<double> dx(n);
  ops::cpu::rope_backward<double>(dx.data(), dy.data(), sz.B, sz.T, sz.H, sz.D, kTheta, pos_offset);
  Shape shape{sz.B, sz.T, sz.H, sz.D};
  Tensor tx = f32_tensor(s, x, shape), tdy = f32_tensor(s, dy, shape);
  Tensor ty = Tensor::empty(shape, DType::f32, cpu_device(0));
  Tensor tdx = f32_tensor(s, std::vector<double>(n, 0.25), shape);  // overwritten
  ops::rope_forward(s, ty, tx, sz.B, sz.T, sz.H, sz.D, kTheta, pos_offset);
  ops::rope_backward(s, tdx, tdy, sz.B, sz.T, sz.H, sz.D, kTheta, pos_offset);
  ops::rope_forward(s, tx, tx, sz.B, sz.T, sz.H, sz.D, kTheta, pos_offset);     // in place
  ops::rope_backward(s, tdy, tdy, sz.B, sz.T, sz.H, sz.D, kTheta, pos_offset);  // in place
  REQUIRE(max_abs(y) > 0.1);
  REQUIRE(max_abs(dx) > 0.1);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, ty), y, 1e-5, 1e-6, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tx), y, 1e-5, 1e-6, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdx), dx, 1e-5, 1e-6, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdy), dx, 1e-5, 1e-6, &why), why);
}

TEST_CASE("rope bf16 forward and backward equal the f32 twin up to one rounding, in place too") {
  // The f32 rows rotate in double, the bf16 rows in float (cos and sin rounded to
  // float) and round once at the store: per element within kBf16Rtol of the f32 value,
  // plus 2^-20 of the inputs' scale for the float math where x1 c - x2 s cancels.
  Stream s(cpu_device(0), "cpu:0 compute");
  for (Sizes sz : {Sizes{1, 1, 1, 2}, Sizes{2, 33, 2, 64}, Sizes{4, 256, 4, 32}}) {
    for (int64_t pos_offset : {0, 1000}) {
      CAPTURE(sz.T);
      CAPTURE(sz.D);
      CAPTURE(pos_offset);
      const int64_t n = sz.B * sz.T * sz.H * sz.D;
      const Shape shape = {sz.B, sz.T, sz.H, sz.D};
      auto x = bf16_rounded(random_vector(n, 21, -2, 2));
      const double atol = std::ldexp(max_abs(x), -20);
      for (bool backward : {false, true}) {
        CAPTURE(backward);
        auto run = [&](const Tensor& out, const Tensor& inp) {
          if (backward)
            ops::rope_backward(s, out, inp, sz.B, sz.T, sz.H, sz.D, kTheta, pos_offset);
          else
            ops::rope_forward(s, out, inp, sz.B, sz.T, sz.H, sz.D, kTheta, pos_offset);
        };
        Tensor y32 = Tensor::empty(shape, DType::f32, cpu_device(0));
        run(y32, f32_tensor(s, x, shape));
        auto ref = f32_values(s, y32);
        REQUIRE(max_abs(ref) > 0.1);
        Tensor x16 = bf16_tensor(s, x, shape);
        Tensor y16 = Tensor::empty(shape, DType::bf16, cpu_device(0));
        run(y16, x16);
        std::string why;
        CHECK_MESSAGE(all_close(bf16_values(s, y16), ref, kBf16Rtol, atol, &why), why);
        run(x16, x16);  // in place gives the same bits
        CHECK(bf16_bits(s, x16) == bf16_bits(s, y16));
      }
    }
  }
}

TEST_CASE("rope refuses mixed or non-float dtypes") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const Shape shape = {1, 2, 1, 4};
  Tensor f = Tensor::empty(shape, DType::f32, cpu_device(0));
  Tensor b = Tensor::empty(shape, DType::bf16, cpu_device(0));
  Tensor i = Tensor::empty(shape, DType::i32, cpu_device(0));
  CHECK_THROWS_AS(ops::rope_forward(s, f, b, 1, 2, 1, 4, kTheta, 0), InternalError);
  CHECK_THROWS_AS(ops::rope_forward(s, b, f, 1, 2, 1, 4, kTheta, 0), InternalError);
  CHECK_THROWS_AS(ops::rope_forward(s, i, i, 1, 2, 1, 4, kTheta, 0), InternalError);
  CHECK_THROWS_AS(ops::rope_backward(s, f, b, 1, 2, 1, 4, kTheta, 0), InternalError);
  CHECK_THROWS_AS(ops::rope_backward(s, b, f, 1, 2, 1, 4, kTheta, 0), InternalError);
}

// --- rope_scaling (ops/rope_freq.h) ---------------------------------------------

namespace {
// Llama 3.1's numbers with the original context shrunk to 64 so that a head of
// D = 32 at theta 10000 has pairs in all three bands: wavelengths 2 pi ... 3.5e4
// against the band edges 64 / 4 = 16 and 64 / 1 = 64.
ops::RopeFreq llama3_freq() {
  return {kTheta, {ops::RopeScalingType::llama3, 8.0, 1.0, 4.0, 64}};
}
}  // namespace

TEST_CASE("llama3 inv_freq keeps high frequencies, divides low ones, blends the band between") {
  const int64_t D = 32;
  const ops::RopeFreq f = llama3_freq();
  int kept = 0, divided = 0, blended = 0;
  for (int64_t i = 0; i < D / 2; ++i) {
    CAPTURE(i);
    const double plain = 1.0 / std::pow(kTheta, 2.0 * i / D);
    const double wavelen = 2 * M_PI / plain;
    const double got = ops::rope_inv_freq(f, i, D);
    CHECK(ops::rope_inv_freq(kTheta, i, D) == plain);  // no scaling: exactly the old formula
    if (wavelen < 16) {
      CHECK(got == plain);
      ++kept;
    } else if (wavelen > 64) {
      CHECK(got == doctest::Approx(plain / 8).epsilon(1e-15));
      ++divided;
    } else {
      // smooth runs from 1 at wavelen 16 to 0 at wavelen 64.
      const double smooth = (64 / wavelen - 1.0) / (4.0 - 1.0);
      CHECK(smooth >= 0);
      CHECK(smooth <= 1);
      CHECK(got == doctest::Approx((1 - smooth) * plain / 8 + smooth * plain).epsilon(1e-15));
      CHECK(got < plain);
      CHECK(got > plain / 8);
      ++blended;
    }
  }
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(blended > 0);
  // linear: every frequency divided.
  const ops::RopeFreq linear{kTheta, {ops::RopeScalingType::linear, 4.0}};
  CHECK(ops::rope_inv_freq(linear, 3, D) == doctest::Approx(ops::rope_inv_freq(kTheta, 3, D) / 4));
}

TEST_CASE("rope with llama3 scaling rotates by the scaled angles, forward and backward") {
  const ops::RopeFreq f = llama3_freq();
  const Sizes s{2, 7, 3, 32};
  const int64_t pos_offset = 50;
  auto x = random_vector(s.B * s.T * s.H * s.D, 7, -2, 2);
  std::vector<double> expected(x.size());
  const int64_t half = s.D / 2;
  for (int64_t bt = 0; bt < s.B * s.T; ++bt)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const int64_t base = (bt * s.H + h) * s.D;
        const double angle = (pos_offset + bt % s.T) * ops::rope_inv_freq(f, i, s.D);
        const double x1 = x[base + i], x2 = x[base + i + half];
        expected[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
        expected[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
  std::vector<double> y(x.size());
  ops::cpu::rope_forward<double>(y.data(), x.data(), s.B, s.T, s.H, s.D, f, pos_offset);
  std::string why;
  CHECK_MESSAGE(all_close(y, expected, 1e-12, 1e-12, &why), why);
  // Not the plain rotation: the scaling reached the tables (and their cache key).
  auto plain = forward_double(x, s, kTheta, pos_offset);
  CHECK_FALSE(all_close(y, plain, 1e-3, 1e-3));

  // Backward: central finite differences of <forward(x), dy>.
  const Sizes small{1, 3, 2, 32};
  auto xs = random_vector(small.B * small.T * small.H * small.D, 8, -2, 2);
  auto dy = random_vector(xs.size(), 9);
  std::vector<double> dx(xs.size());
  ops::cpu::rope_backward<double>(dx.data(), dy.data(), small.B, small.T, small.H, small.D, f,
                                  pos_offset);
  auto gx = numeric_grad(
      [&](const std::vector<double>& v) {
        std::vector<double> out(v.size());
        ops::cpu::rope_forward<double>(out.data(), v.data(), small.B, small.T, small.H, small.D, f,
                                       pos_offset);
        return dot(out, dy);
      },
      xs);
  REQUIRE(max_abs(gx) > 0.1);
  CHECK_MESSAGE(all_close(dx, gx, 1e-6, 1e-8, &why), why);

  // The f32 and bf16 dispatch read the same scaled tables.
  Stream st(cpu_device(0), "cpu:0 compute");
  const Shape shape{s.B, s.T, s.H, s.D};
  Tensor t = f32_tensor(st, x, shape);
  ops::rope_forward(st, t, t, s.B, s.T, s.H, s.D, f, pos_offset);
  CHECK_MESSAGE(all_close(f32_values(st, t), expected, 1e-5, 1e-6, &why), why);
  Tensor b16 = bf16_tensor(st, bf16_rounded(x), shape);
  ops::rope_forward(st, b16, b16, s.B, s.T, s.H, s.D, f, pos_offset);
  CHECK_MESSAGE(all_close(bf16_values(st, b16), expected, 2e-2, 2e-2, &why), why);
}

TEST_CASE("rope over strided rows (the fused q/k/v layout) equals the contiguous op") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (DType x : {DType::f32, DType::bf16}) {
    check_rope_rows(s, x, 2, 5, 3, 1, 8);
    check_rope_rows(s, x, 1, 33, 4, 2, 64);
  }
}

TEST_CASE(
    "rope refuses a row stride under H * D, a view too short, and aliasing with two strides") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t B = 1, T = 3, H = 2, D = 4;  // rows of 8
  Tensor buf = Tensor::empty({40}, DType::f32, cpu_device(0));
  Tensor out = Tensor::empty({24}, DType::f32, cpu_device(0));
  CHECK_THROWS_AS(ops::rope_forward(s, out, buf, B, T, H, D, kTheta, 0, 0, 7), InternalError);
  CHECK_THROWS_AS(ops::rope_forward(s, out, buf.view(20, {20}), B, T, H, D, kTheta, 0, 0, 12),
                  InternalError);  // 2 * 12 + 8 = 32 elements needed
  CHECK_THROWS_AS(ops::rope_forward(s, buf, buf, B, T, H, D, kTheta, 0, 12, 8), InternalError);
  CHECK_THROWS_AS(ops::rope_backward(s, buf, buf, B, T, H, D, kTheta, 0, 8, 12), InternalError);
  CHECK_NOTHROW(ops::rope_forward(s, out, buf.view(8, {32}), B, T, H, D, kTheta, 0, 0, 12));
  s.synchronize();
}
