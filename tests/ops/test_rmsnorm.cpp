// RMSNorm: forward against the direct double formula, backward against central
// finite differences (both in double), and the f32 dispatch against double. bf16
// weight and output (the bf16 contract) against the fp32 twin on the same values.

#include <doctest/doctest.h>

#include <cmath>

#include "engine/core/check.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/rmsnorm.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct Sizes {
  int64_t N, C;
};
const Sizes kSizes[] = {{1, 1}, {1, 7}, {3, 5}, {5, 33}, {2, 128}};

std::vector<double> forward_double(const std::vector<double>& x, const std::vector<double>& w,
                                   int64_t N, int64_t C, double eps) {
  std::vector<double> y(N * C), rstd(N);
  ops::cpu::rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  return y;
}
}  // namespace

TEST_CASE("rmsnorm forward matches the direct double formula") {
  for (auto [N, C] : kSizes) {
    CAPTURE(N);
    CAPTURE(C);
    auto x = random_vector(N * C, 1, -2, 2);
    auto w = random_vector(C, 2, 0.5, 1.5);
    double eps = 1e-5;
    std::vector<double> expected(N * C);
    for (int64_t n = 0; n < N; ++n) {
      double ms = 0;
      for (int64_t c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
      ms /= C;
      for (int64_t c = 0; c < C; ++c)
        expected[n * C + c] = x[n * C + c] / std::sqrt(ms + eps) * w[c];
    }
    REQUIRE(max_abs(expected) > 0.1);
    std::string why;
    CHECK_MESSAGE(all_close(forward_double(x, w, N, C, eps), expected, 1e-12, 1e-12, &why), why);
  }
}

TEST_CASE("rmsnorm backward matches central finite differences") {
  for (auto [N, C] : kSizes) {
    CAPTURE(N);
    CAPTURE(C);
    auto x = random_vector(N * C, 3, -2, 2);
    auto w = random_vector(C, 4, 0.5, 1.5);
    auto dy = random_vector(N * C, 5);
    double eps = 1e-5;
    std::vector<double> y(N * C), rstd(N), dx(N * C, 0.0), dw(C, 0.0);
    ops::cpu::rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    ops::cpu::rmsnorm_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(),
                                       rstd.data(), N, C);
    auto gx = numeric_grad(
        [&](const std::vector<double>& v) { return dot(forward_double(v, w, N, C, eps), dy); }, x);
    auto gw = numeric_grad(
        [&](const std::vector<double>& v) { return dot(forward_double(x, v, N, C, eps), dy); }, w);
    if (C > 1) REQUIRE(max_abs(gx) > 1e-3);  // with C = 1 the output is sign(x) w: dx ~ 0
    REQUIRE(max_abs(gw) > 1e-3);
    std::string why;
    CHECK_MESSAGE(all_close(dx, gx, 1e-6, 1e-8, &why), why);
    CHECK_MESSAGE(all_close(dw, gw, 1e-6, 1e-8, &why), why);
  }
}

TEST_CASE("rmsnorm f32 dispatch on a CPU device agrees with double and accumulates gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  int64_t N = 5, C = 33;
  auto x = random_vector(N * C, 6, -2, 2);
  auto w = random_vector(C, 7, 0.5, 1.5);
  auto dy = random_vector(N * C, 8);
  std::vector<double> y(N * C), rstd(N), dx(N * C, 0.25), dw(C, -0.5);  // prior gradient values
  ops::cpu::rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
  ops::cpu::rmsnorm_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(),
                                     rstd.data(), N, C);
  Tensor tx = f32_tensor(s, x, {N, C}), tw = f32_tensor(s, w, {C}), tdy = f32_tensor(s, dy, {N, C});
  Tensor ty = Tensor::empty({N, C}, DType::f32, cpu_device(0));
  Tensor trstd = Tensor::empty({N}, DType::f32, cpu_device(0));
  Tensor tdx = f32_tensor(s, std::vector<double>(N * C, 0.25), {N, C});
  Tensor tdw = f32_tensor(s, std::vector<double>(C, -0.5), {C});
  ops::rmsnorm_forward(s, ty, trstd, tx, tw, N, C, 1e-5f);
  ops::rmsnorm_backward(s, tdx, tdw, tdy, tx, tw, trstd, N, C);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, ty), y, 1e-5, 1e-6, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdx), dx, 1e-5, 1e-5, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdw), dw, 1e-5, 1e-5, &why), why);
}

TEST_CASE("rmsnorm bf16 weight and output are the f32 result rounded once at the store") {
  // The kernel's float math is the same for every storage type, so the tolerance is
  // exactly one rounding: a bf16 out equals float_to_bf16 of the f32 out, bit for bit.
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, C] : {Sizes{1, 1}, Sizes{3, 5}, Sizes{1024, 128}}) {
    CAPTURE(N);
    CAPTURE(C);
    auto x = random_vector(N * C, 11, -2, 2);
    auto w = bf16_rounded(random_vector(C, 12, 0.5, 1.5));  // what a bf16 weight holds
    Tensor tx = f32_tensor(s, x, {N, C});
    Tensor y32 = Tensor::empty({N, C}, DType::f32, cpu_device(0));
    Tensor rstd32 = Tensor::empty({N}, DType::f32, cpu_device(0));
    ops::rmsnorm_forward(s, y32, rstd32, tx, f32_tensor(s, w, {C}), N, C, 1e-5f);
    auto ref = f32_values(s, y32);
    REQUIRE(max_abs(ref) > 0.1);
    for (DType out_t : {DType::f32, DType::bf16}) {
      for (DType w_t : {DType::f32, DType::bf16}) {
        CAPTURE(dtype_name(out_t));
        CAPTURE(dtype_name(w_t));
        Tensor y = Tensor::empty({N, C}, out_t, cpu_device(0));
        Tensor rstd = Tensor::empty({N}, DType::f32, cpu_device(0));
        ops::rmsnorm_forward(s, y, rstd, tx, float_tensor(s, w_t, w, {C}), N, C, 1e-5f);
        CHECK(f32_values(s, rstd) == f32_values(s, rstd32));
        if (out_t == DType::f32) {
          CHECK(f32_values(s, y) == ref);
        } else {
          size_t bad = 0;
          CHECK_MESSAGE(bf16_is_rounding_of(bf16_values(s, y), ref, &bad), "element ", bad);
          std::string why;  // and so within one bf16 rounding of the twin
          CHECK_MESSAGE(all_close(bf16_values(s, y), ref, kBf16Rtol, 0, &why), why);
        }
      }
    }
  }
}

TEST_CASE("rmsnorm backward with a bf16 weight equals the f32 backward on the same weight") {
  // Gradients stay f32 and the bf16 weight loads to the same floats: no rounding at all.
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 9, C = 33;
  auto x = random_vector(N * C, 13, -2, 2);
  auto w = bf16_rounded(random_vector(C, 14, 0.5, 1.5));
  auto dy = random_vector(N * C, 15);
  Tensor tx = f32_tensor(s, x, {N, C}), tdy = f32_tensor(s, dy, {N, C});
  Tensor y = Tensor::empty({N, C}, DType::f32, cpu_device(0));
  Tensor rstd = Tensor::empty({N}, DType::f32, cpu_device(0));
  ops::rmsnorm_forward(s, y, rstd, tx, f32_tensor(s, w, {C}), N, C, 1e-5f);
  std::vector<std::vector<double>> dx, dw;
  for (DType w_t : {DType::f32, DType::bf16}) {
    Tensor tdx = f32_tensor(s, std::vector<double>(N * C, 0.25), {N, C});  // accumulates
    Tensor tdw = f32_tensor(s, std::vector<double>(C, -0.5), {C});
    ops::rmsnorm_backward(s, tdx, tdw, tdy, tx, float_tensor(s, w_t, w, {C}), rstd, N, C);
    dx.push_back(f32_values(s, tdx));
    dw.push_back(f32_values(s, tdw));
  }
  REQUIRE(max_abs(dx[0]) > 0.3);
  CHECK(dx[1] == dx[0]);
  CHECK(dw[1] == dw[0]);
}

TEST_CASE("rmsnorm refuses dtypes outside the bf16 contract") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 2, C = 4;
  auto cpu = cpu_device(0);
  Tensor f = Tensor::empty({N, C}, DType::f32, cpu), b = Tensor::empty({N, C}, DType::bf16, cpu);
  Tensor r = Tensor::empty({N}, DType::f32, cpu), rb = Tensor::empty({N}, DType::bf16, cpu);
  Tensor w = Tensor::empty({C}, DType::f32, cpu), wi = Tensor::empty({C}, DType::i32, cpu);
  Tensor wb = Tensor::empty({C}, DType::bf16, cpu);
  // forward: inp and rstd stay f32; weight f32 or bf16 only.
  CHECK_THROWS_AS(ops::rmsnorm_forward(s, f, r, b, w, N, C, 1e-5f), InternalError);
  CHECK_THROWS_AS(ops::rmsnorm_forward(s, f, rb, f, w, N, C, 1e-5f), InternalError);
  CHECK_THROWS_AS(ops::rmsnorm_forward(s, f, r, f, wi, N, C, 1e-5f), InternalError);
  // backward: gradients, dout, inp, rstd f32.
  CHECK_THROWS_AS(ops::rmsnorm_backward(s, b, w, f, f, w, r, N, C), InternalError);
  CHECK_THROWS_AS(ops::rmsnorm_backward(s, f, wb, f, f, w, r, N, C), InternalError);
  CHECK_THROWS_AS(ops::rmsnorm_backward(s, f, w, b, f, w, r, N, C), InternalError);
  CHECK_THROWS_AS(ops::rmsnorm_backward(s, f, w, f, b, w, r, N, C), InternalError);
  CHECK_THROWS_AS(ops::rmsnorm_backward(s, f, w, f, f, w, rb, N, C), InternalError);
  CHECK_NOTHROW(ops::rmsnorm_forward(s, b, r, f, wb, N, C, 1e-5f));
  s.synchronize();
}
