// Residual add: forward against a + b in double, backward against central finite
// differences, gradients accumulating, out aliasing a, and the f32 dispatch against
// double (one size past the parallel grain).

#include <doctest/doctest.h>

#include "ops/cpu/residual.h"
#include "ops/residual.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
const int64_t kSizes[] = {1, 2, 5, 33, 1001};

std::vector<double> forward_double(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> y(a.size());
  ops::cpu::residual_forward<double>(y.data(), a.data(), b.data(), static_cast<int64_t>(a.size()));
  return y;
}
}  // namespace

TEST_CASE("residual forward matches a plus b in double") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    auto a = random_vector(n, 1), b = random_vector(n, 2);
    std::vector<double> expected(n);
    for (int64_t i = 0; i < n; ++i) expected[i] = a[i] + b[i];
    REQUIRE(max_abs(expected) > 0.01);
    CHECK(forward_double(a, b) == expected);  // one rounding each side: exact
  }
}

TEST_CASE("residual backward matches central finite differences") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    auto a = random_vector(n, 3), b = random_vector(n, 4), dy = random_vector(n, 5);
    std::vector<double> da(n, 0.0), db(n, 0.0);
    ops::cpu::residual_backward<double>(da.data(), db.data(), dy.data(), n);
    auto ga = numeric_grad(
        [&](const std::vector<double>& v) { return dot(forward_double(v, b), dy); }, a);
    auto gb = numeric_grad(
        [&](const std::vector<double>& v) { return dot(forward_double(a, v), dy); }, b);
    REQUIRE(max_abs(ga) > 1e-3);
    REQUIRE(max_abs(gb) > 1e-3);
    std::string why;
    CHECK_MESSAGE(all_close(da, ga, 1e-6, 1e-8, &why), why);
    CHECK_MESSAGE(all_close(db, gb, 1e-6, 1e-8, &why), why);
  }
}

TEST_CASE("residual forward in place with out aliasing a") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t n = 33;
  auto a = random_vector(n, 6), b = random_vector(n, 7);
  Tensor ta = f32_tensor(s, a, {n});
  ops::residual_forward(s, ta, ta, f32_tensor(s, b, {n}), n);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, ta), forward_double(a, b), 1e-6, 1e-7, &why), why);
}

TEST_CASE("residual f32 dispatch on a CPU device agrees with double and accumulates gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t n = 40001;  // past the parallel grain, odd
  auto a = random_vector(n, 8), b = random_vector(n, 9), dy = random_vector(n, 10);
  std::vector<double> da(n, 0.25), db(n, -0.5);  // prior gradient values
  auto y = forward_double(a, b);
  ops::cpu::residual_backward<double>(da.data(), db.data(), dy.data(), n);
  Tensor ty = Tensor::empty({n}, DType::f32, cpu_device(0));
  Tensor tda = f32_tensor(s, std::vector<double>(n, 0.25), {n});
  Tensor tdb = f32_tensor(s, std::vector<double>(n, -0.5), {n});
  ops::residual_forward(s, ty, f32_tensor(s, a, {n}), f32_tensor(s, b, {n}), n);
  ops::residual_backward(s, tda, tdb, f32_tensor(s, dy, {n}), n);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, ty), y, 1e-6, 1e-7, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tda), da, 1e-6, 1e-7, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdb), db, 1e-6, 1e-7, &why), why);
}
