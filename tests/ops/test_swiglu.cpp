// SwiGLU: forward against silu(gate) * up in double, backward against central
// finite differences, finite results for large |gate|, and the f32 dispatch
// against double (one size past the parallel grain). bf16 storage (the bf16
// contract) against the fp32 twin on the same values, for every dout dtype. Over
// rows (the fused gate/up layout) against the flat op.

#include <doctest/doctest.h>

#include <cmath>

#include "engine/core/check.h"
#include "ops/cpu/swiglu.h"
#include "ops/swiglu.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"
#include "tests/ops/strided_ops_test_util.h"

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

TEST_CASE("swiglu bf16 forward and backward equal the f32 twin up to one rounding") {
  // Both compute in float with the same sigmoid; a bf16 output is rounded once at the
  // store, so it is within kBf16Rtol of the f32 output (exact zeros compare equal).
  // f32 outputs from bf16 inputs (X = f32, dout bf16) see the same floats: equal.
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t n : {1, 33, 1024 * 384 + 5}) {  // the last: tiny's N * I, past the grain
    CAPTURE(n);
    auto g = bf16_rounded(random_vector(n, 31, -6, 6));
    auto u = bf16_rounded(random_vector(n, 32, -2, 2));
    auto dy = bf16_rounded(random_vector(n, 33));
    Tensor g32 = f32_tensor(s, g, {n}), u32 = f32_tensor(s, u, {n});
    Tensor g16 = bf16_tensor(s, g, {n}), u16 = bf16_tensor(s, u, {n});
    std::string why;

    Tensor y32 = Tensor::empty({n}, DType::f32, cpu_device(0));
    Tensor y16 = Tensor::empty({n}, DType::bf16, cpu_device(0));
    ops::swiglu_forward(s, y32, g32, u32, n);
    ops::swiglu_forward(s, y16, g16, u16, n);
    auto ref = f32_values(s, y32);
    REQUIRE(max_abs(ref) > 0.1);
    CHECK_MESSAGE(all_close(bf16_values(s, y16), ref, kBf16Rtol, 1e-30, &why), why);

    Tensor dg32 = Tensor::empty({n}, DType::f32, cpu_device(0));
    Tensor du32 = Tensor::empty({n}, DType::f32, cpu_device(0));
    ops::swiglu_backward(s, dg32, du32, f32_tensor(s, dy, {n}), g32, u32, n);
    auto dg_ref = f32_values(s, dg32), du_ref = f32_values(s, du32);
    if (n > 1) REQUIRE(max_abs(dg_ref) > 0.1);
    for (DType x_t : {DType::f32, DType::bf16}) {
      for (DType dout_t : {DType::f32, DType::bf16}) {
        CAPTURE(dtype_name(x_t));
        CAPTURE(dtype_name(dout_t));
        Tensor dg = Tensor::empty({n}, x_t, cpu_device(0));
        Tensor du = Tensor::empty({n}, x_t, cpu_device(0));
        ops::swiglu_backward(s, dg, du, float_tensor(s, dout_t, dy, {n}),
                             x_t == DType::f32 ? g32 : g16, x_t == DType::f32 ? u32 : u16, n);
        const double rtol = x_t == DType::f32 ? 0.0 : kBf16Rtol;
        CHECK_MESSAGE(all_close(float_values(s, dg), dg_ref, rtol, 1e-30, &why), why);
        CHECK_MESSAGE(all_close(float_values(s, du), du_ref, rtol, 1e-30, &why), why);
        if (x_t == DType::bf16) {  // gradients over their inputs give the same bits
          Tensor ga = bf16_tensor(s, g, {n}), ua = bf16_tensor(s, u, {n});
          ops::swiglu_backward(s, ga, ua, float_tensor(s, dout_t, dy, {n}), ga, ua, n);
          CHECK(bf16_bits(s, ga) == bf16_bits(s, dg));
          CHECK(bf16_bits(s, ua) == bf16_bits(s, du));
        }
      }
    }
  }
}

TEST_CASE("swiglu refuses dtypes outside the bf16 contract") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t n = 4;
  Tensor f = Tensor::empty({n}, DType::f32, cpu_device(0));
  Tensor b = Tensor::empty({n}, DType::bf16, cpu_device(0));
  Tensor i = Tensor::empty({n}, DType::i32, cpu_device(0));
  // forward: gate, up, out all of one dtype.
  CHECK_THROWS_AS(ops::swiglu_forward(s, f, b, b, n), InternalError);
  CHECK_THROWS_AS(ops::swiglu_forward(s, b, b, f, n), InternalError);
  CHECK_THROWS_AS(ops::swiglu_forward(s, b, f, f, n), InternalError);
  CHECK_THROWS_AS(ops::swiglu_forward(s, i, i, i, n), InternalError);
  // backward: gate, up, dgate, dup of one dtype; dout f32 or bf16.
  CHECK_THROWS_AS(ops::swiglu_backward(s, f, f, b, b, b, n), InternalError);
  CHECK_THROWS_AS(ops::swiglu_backward(s, b, b, f, b, f, n), InternalError);
  CHECK_THROWS_AS(ops::swiglu_backward(s, b, f, b, b, b, n), InternalError);
  CHECK_THROWS_AS(ops::swiglu_backward(s, b, b, i, b, b, n), InternalError);
}

TEST_CASE(
    "swiglu over rows (the fused gate/up layout) equals the flat op and writes nothing else") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (DType x : {DType::f32, DType::bf16})
    for (DType g : {DType::f32, DType::bf16}) {
      check_swiglu_rows(s, x, g, 7, 33, 66, 33);           // fused: ld = 2 cols
      check_swiglu_rows(s, x, g, 5, 64, 131, 66);          // gaps between and after
      check_swiglu_rows(s, x, g, 1, 20001, 40002, 20001);  // one row past the grain
      check_swiglu_rows(s, x, g, 300, 40, 80, 40);         // rows across task boundaries
    }
}

TEST_CASE("swiglu over rows refuses a stride under the row and views too short") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Tensor gu = Tensor::empty({40}, DType::f32, cpu_device(0));
  Tensor out = Tensor::empty({20}, DType::f32, cpu_device(0));
  CHECK_THROWS_AS(ops::swiglu_forward_rows(s, out, gu, gu, 4, 5, 4), InternalError);
  // up from column 5 of 4 rows 10 apart needs 35 elements from there
  CHECK_THROWS_AS(ops::swiglu_forward_rows(s, out, gu, gu.view(10, {30}), 4, 5, 10), InternalError);
  CHECK_NOTHROW(ops::swiglu_forward_rows(s, out, gu, gu.view(5, {35}), 4, 5, 10));
  s.synchronize();
}
