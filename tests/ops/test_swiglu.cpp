// SwiGLU: forward against silu(gate) * up in double, backward against central
// finite differences, finite results for large |gate|, and the f32 dispatch
// against double (one size past the parallel grain).

#include <doctest/doctest.h>

#include <cmath>

#include "ops/cpu/swiglu.h"
#include "ops/swiglu.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
const int64_t kSizes[] = {1, 2, 5, 33, 1001};

std::vector<double> forward_double(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> y(g.size());
  ops::cpu::swiglu_forward<double>(y.data(), g.data(), u.data(), static_cast<int64_t>(g.size()));
  return y;
}
}  // namespace

TEST_CASE("swiglu forward matches silu of gate times up in double") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    auto g = random_vector(n, 1, -6, 6), u = random_vector(n, 2, -2, 2);
    std::vector<double> expected(n);
    for (int64_t i = 0; i < n; ++i) expected[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    REQUIRE(max_abs(expected) > 0.01);
    std::string why;
    CHECK_MESSAGE(all_close(forward_double(g, u), expected, 1e-14, 1e-15, &why), why);
  }
}

TEST_CASE("swiglu backward matches central finite differences") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    auto g = random_vector(n, 3, -6, 6), u = random_vector(n, 4, -2, 2);
    auto dy = random_vector(n, 5);
    std::vector<double> dg(n, 123.0), du(n, 123.0);  // junk: backward must overwrite
    ops::cpu::swiglu_backward<double>(dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
    auto gg = numeric_grad(
        [&](const std::vector<double>& v) { return dot(forward_double(v, u), dy); }, g);
    auto gu = numeric_grad(
        [&](const std::vector<double>& v) { return dot(forward_double(g, v), dy); }, u);
    REQUIRE(max_abs(gg) > 1e-3);
    REQUIRE(max_abs(gu) > 1e-3);
    std::string why;
    CHECK_MESSAGE(all_close(dg, gg, 1e-6, 1e-8, &why), why);
    CHECK_MESSAGE(all_close(du, gu, 1e-6, 1e-8, &why), why);
  }
}

TEST_CASE("swiglu stays finite and takes the silu limits for large gate magnitudes") {
  // exp(100) overflows float: a naive sigmoid would give NaN or inf here.
  Stream s(cpu_device(0), "cpu:0 compute");
  std::vector<double> g = {-1000, -100, -89, 89, 100, 1000}, u(g.size(), 2.0), dy(g.size(), 3.0);
  const int64_t n = static_cast<int64_t>(g.size());
  // silu(x) -> 0 and silu'(x) -> 0 as x -> -inf; silu(x) -> x and silu'(x) -> 1 as x -> +inf.
  std::vector<double> y_limit(n), dg_limit(n), du_limit(n);
  for (int64_t i = 0; i < n; ++i) {
    bool pos = g[i] > 0;
    y_limit[i] = pos ? g[i] * u[i] : 0.0;
    dg_limit[i] = pos ? dy[i] * u[i] : 0.0;
    du_limit[i] = pos ? dy[i] * g[i] : 0.0;
  }
  Tensor tg = f32_tensor(s, g, {n}), tu = f32_tensor(s, u, {n});
  Tensor ty = Tensor::empty({n}, DType::f32, cpu_device(0));
  Tensor tdg = Tensor::empty({n}, DType::f32, cpu_device(0));
  Tensor tdu = Tensor::empty({n}, DType::f32, cpu_device(0));
  ops::swiglu_forward(s, ty, tg, tu, n);
  ops::swiglu_backward(s, tdg, tdu, f32_tensor(s, dy, {n}), tg, tu, n);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, ty), y_limit, 1e-6, 1e-30, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdg), dg_limit, 1e-6, 1e-30, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdu), du_limit, 1e-6, 1e-30, &why), why);
  for (double x : g) {
    CHECK(std::isfinite(ops::cpu::sigmoid_stable<float>(static_cast<float>(x))));
    CHECK(std::isfinite(ops::cpu::sigmoid_stable<double>(x)));
  }
}

TEST_CASE("swiglu f32 dispatch on a CPU device agrees with double") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t n = 20001;  // past the parallel grain, odd
  auto g = random_vector(n, 6, -6, 6), u = random_vector(n, 7, -2, 2), dy = random_vector(n, 8);
  std::vector<double> dg(n), du(n);
  auto y = forward_double(g, u);
  ops::cpu::swiglu_backward<double>(dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
  Tensor tg = f32_tensor(s, g, {n}), tu = f32_tensor(s, u, {n});
  Tensor ty = Tensor::empty({n}, DType::f32, cpu_device(0));
  Tensor tdg = f32_tensor(s, std::vector<double>(n, 123.0), {n});  // junk: overwritten
  Tensor tdu = f32_tensor(s, std::vector<double>(n, 123.0), {n});
  ops::swiglu_forward(s, ty, tg, tu, n);
  ops::swiglu_backward(s, tdg, tdu, f32_tensor(s, dy, {n}), tg, tu, n);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, ty), y, 1e-5, 1e-6, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdg), dg, 1e-5, 1e-6, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdu), du, 1e-5, 1e-6, &why), why);
}
