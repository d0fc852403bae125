// Global gradient norm and clipping: norm_squared against the direct sum, the norm
// and the clipped gradients against torch's clip_grad_norm_, the coefficient's
// threshold, NaN/Inf propagation, and the f32 dispatch against double.

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "ops/cpu/grad_norm.h"
#include "ops/grad_norm.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
const int64_t kSizes[] = {1, 7, 33, 2 * 65536 + 3};  // the last spans three chunks

double norm_squared_f32(Stream& s, const std::vector<double>& values) {
  auto n = static_cast<int64_t>(values.size());
  Tensor buf = f32_tensor(s, values, {n});
  Tensor out = f32_tensor(s, {-1.0}, {1});
  ops::norm_squared(s, out, buf, n);
  return f32_values(s, out)[0];
}
}  // namespace

TEST_CASE("norm_squared matches the direct double sum of squares") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    auto x = random_vector(n, 1, -3, 3);
    double expected = 0;
    for (double v : x) expected += v * v;
    REQUIRE(expected > 0.1);
    double out = -1;
    ops::cpu::norm_squared<double>(&out, x.data(), n);
    CHECK(out == doctest::Approx(expected).epsilon(1e-12));
  }
}

TEST_CASE("global norm and clipped gradients match torch clip_grad_norm_") {
  // Recorded with torch 1.13:
  //   import torch
  //   a = torch.nn.Parameter(torch.zeros(3)); b = torch.nn.Parameter(torch.zeros(2, 2))
  //   for max_norm in (1.0, 10.0):
  //       a.grad = torch.tensor([0.5, -1.5, 2.25]); b.grad = torch.tensor([[1.0, -0.75],
  //       [0.125, 3.0]]) n = torch.nn.utils.clip_grad_norm_([a, b], max_norm=max_norm) print('%.9g'
  //       % n.item(), ', '.join('%.9g' % x for x in a.grad.tolist() + b.grad.flatten().tolist()))
  const double torch_norm = 4.25918102;
  const std::vector<double> torch_clipped_1 = {0.117393434,  -0.352180302, 0.528270483, 0.234786868,
                                               -0.176090151, 0.0293483585, 0.704360604};
  const std::vector<double> grads = {0.5, -1.5, 2.25, 1.0, -0.75, 0.125, 3.0};  // a, then b

  Stream s(cpu_device(0), "cpu:0 compute");
  double norm = std::sqrt(norm_squared_f32(s, grads));
  CHECK(norm == doctest::Approx(torch_norm).epsilon(1e-7));

  float coef = ops::clip_coefficient(norm, 1.0);
  std::vector<double> clipped(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) clipped[i] = static_cast<float>(grads[i]) * coef;
  std::string why;
  CHECK_MESSAGE(all_close(clipped, torch_clipped_1, 1e-6, 1e-9, &why), why);

  // max_norm 10: torch leaves the gradients as they were, so the factor is exactly 1.
  CHECK(ops::clip_coefficient(norm, 10.0) == 1.0f);
}

TEST_CASE("clip coefficient is exactly one below the threshold") {
  CHECK(ops::clip_coefficient(0.0, 1.0) == 1.0f);
  CHECK(ops::clip_coefficient(0.5, 1.0) == 1.0f);
  CHECK(ops::clip_coefficient(1.0 - 2e-6, 1.0) == 1.0f);
  // At and above the threshold torch's formula applies: max / (norm + 1e-6).
  CHECK(ops::clip_coefficient(1.0, 1.0) < 1.0f);
  CHECK(ops::clip_coefficient(1.0, 1.0) == static_cast<float>(1.0 / (1.0 + 1e-6)));
  CHECK(ops::clip_coefficient(4.0, 1.0) == static_cast<float>(1.0 / (4.0 + 1e-6)));
}

TEST_CASE("norm_squared propagates NaN and Inf") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto x = random_vector(33, 2);
  auto with = [&](double bad, size_t at) {
    auto y = x;
    y[at] = bad;
    return y;
  };
  CHECK(std::isinf(norm_squared_f32(s, with(inf, 5))));
  CHECK(std::isinf(norm_squared_f32(s, with(-inf, 0))));
  CHECK(std::isnan(norm_squared_f32(s, with(nan, 32))));
  auto both = with(inf, 3);
  both[7] = nan;
  CHECK(std::isnan(norm_squared_f32(s, both)));
  // Finite fp32 gradients whose sum of squares overflows fp32 give Inf too.
  CHECK(std::isinf(norm_squared_f32(s, with(1e20, 1))));
  // ...and the clip coefficient carries them on: NaN stays NaN, Inf scales to 0.
  CHECK(std::isnan(ops::clip_coefficient(nan, 1.0)));
  CHECK(ops::clip_coefficient(inf, 1.0) == 0.0f);
}

TEST_CASE("norm_squared f32 dispatch on a CPU device agrees with double") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t n : kSizes) {
    CAPTURE(n);
    auto x = random_vector(n, 3, -3, 3);
    double expected = -1;
    ops::cpu::norm_squared<double>(&expected, x.data(), n);
    REQUIRE(expected > 0.1);
    CHECK(norm_squared_f32(s, x) == doctest::Approx(expected).epsilon(1e-6));
  }
}
