// Matmul y = x W^T: forward against a triple loop in double, backward against
// central finite differences, gradients accumulating into prior values, an
// undefined dinp skipped, the f32 (oneDNN) dispatch against double (dgemm), and
// GEMMs from two threads at once bit-identical to one thread; dinp overwritten (no
// zero fill) equal to dinp added onto zeros. bf16: test_matmul_bf16.cpp.

#include <doctest/doctest.h>

#include <cstring>
#include <thread>

#include "ops/cpu/matmul.h"
#include "ops/matmul.h"
#include "tests/ops/matmul_dinp_test_util.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct Sizes {
  int64_t N, C, OC;
};
const Sizes kSizes[] = {{1, 1, 1}, {1, 7, 3}, {3, 5, 4}, {7, 33, 17}, {12, 40, 9}};

std::vector<double> forward_double(const std::vector<double>& x, const std::vector<double>& w,
                                   int64_t N, int64_t C, int64_t OC) {
  std::vector<double> y(N * OC, -7.0);  // junk: forward must overwrite
  ops::cpu::matmul_forward<double>(y.data(), x.data(), w.data(), N, C, OC);
  return y;
}
}  // namespace

TEST_CASE("matmul forward matches a triple loop in double") {
  for (auto [N, C, OC] : kSizes) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(OC);
    auto x = random_vector(N * C, 1);
    auto w = random_vector(OC * C, 2);
    std::vector<double> expected(N * OC, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t c = 0; c < C; ++c) expected[n * OC + o] += x[n * C + c] * w[o * C + c];
    REQUIRE(max_abs(expected) > 0.01);
    std::string why;
    CHECK_MESSAGE(all_close(forward_double(x, w, N, C, OC), expected, 1e-12, 1e-12, &why), why);
  }
}

TEST_CASE("matmul backward matches central finite differences") {
  for (auto [N, C, OC] : kSizes) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(OC);
    auto x = random_vector(N * C, 3);
    auto w = random_vector(OC * C, 4);
    auto dy = random_vector(N * OC, 5);
    std::vector<double> dx(N * C, 0.0), dw(OC * C, 0.0);
    ops::cpu::matmul_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, C,
                                      OC);
    auto gx = numeric_grad(
        [&](const std::vector<double>& v) { return dot(forward_double(v, w, N, C, OC), dy); }, x);
    auto gw = numeric_grad(
        [&](const std::vector<double>& v) { return dot(forward_double(x, v, N, C, OC), dy); }, w);
    REQUIRE(max_abs(gx) > 1e-3);
    REQUIRE(max_abs(gw) > 1e-3);
    std::string why;
    CHECK_MESSAGE(all_close(dx, gx, 1e-6, 1e-8, &why), why);
    CHECK_MESSAGE(all_close(dw, gw, 1e-6, 1e-8, &why), why);
  }
}

TEST_CASE("matmul backward accumulates into prior gradient values") {
  const int64_t N = 7, C = 33, OC = 17;
  auto x = random_vector(N * C, 6);
  auto w = random_vector(OC * C, 7);
  auto dy = random_vector(N * OC, 8);
  std::vector<double> dx0(N * C, 0.0), dw0(OC * C, 0.0), dx(N * C, 0.25), dw(OC * C, -0.5);
  ops::cpu::matmul_backward<double>(dx0.data(), dw0.data(), dy.data(), x.data(), w.data(), N, C,
                                    OC);
  ops::cpu::matmul_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, C, OC);
  for (double& v : dx0) v += 0.25;
  for (double& v : dw0) v -= 0.5;
  std::string why;
  CHECK_MESSAGE(all_close(dx, dx0, 1e-14, 1e-14, &why), why);
  CHECK_MESSAGE(all_close(dw, dw0, 1e-14, 1e-14, &why), why);
}

TEST_CASE("matmul backward with an undefined dinp still computes dweight") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 3, C = 5, OC = 4;
  auto x = random_vector(N * C, 9);
  auto w = random_vector(OC * C, 10);
  auto dy = random_vector(N * OC, 11);
  std::vector<double> dx(N * C, 0.0), dw(OC * C, 0.0), dw_only(OC * C, 0.0);
  ops::cpu::matmul_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, C, OC);
  ops::cpu::matmul_backward<double>(nullptr, dw_only.data(), dy.data(), x.data(), w.data(), N, C,
                                    OC);
  CHECK(dw_only == dw);
  Tensor tdw = f32_tensor(s, std::vector<double>(OC * C, 0.0), {OC, C});
  ops::matmul_backward(s, Tensor(), tdw, f32_tensor(s, dy, {N, OC}), f32_tensor(s, x, {N, C}),
                       f32_tensor(s, w, {OC, C}), N, C, OC);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, tdw), dw, 1e-5, 1e-6, &why), why);
}

TEST_CASE("matmul f32 dispatch on a CPU device agrees with double and accumulates gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 7, C = 33, OC = 17;
  auto x = random_vector(N * C, 12);
  auto w = random_vector(OC * C, 13);
  auto dy = random_vector(N * OC, 14);
  std::vector<double> dx(N * C, 0.25), dw(OC * C, -0.5);  // prior gradient values
  auto y = forward_double(x, w, N, C, OC);
  ops::cpu::matmul_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, C, OC);
  Tensor tx = f32_tensor(s, x, {N, C}), tw = f32_tensor(s, w, {OC, C});
  Tensor ty = f32_tensor(s, std::vector<double>(N * OC, -7.0), {N, OC});
  Tensor tdx = f32_tensor(s, std::vector<double>(N * C, 0.25), {N, C});
  Tensor tdw = f32_tensor(s, std::vector<double>(OC * C, -0.5), {OC, C});
  ops::matmul_forward(s, ty, tx, tw, N, C, OC);
  ops::matmul_backward(s, tdx, tdw, f32_tensor(s, dy, {N, OC}), tx, tw, N, C, OC);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, ty), y, 1e-5, 1e-5, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdx), dx, 1e-5, 1e-5, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdw), dw, 1e-5, 1e-5, &why), why);
}

TEST_CASE("matmul f32 dispatch at block-straddling sizes agrees with double") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, C, OC] : {Sizes{37, 130, 70}, Sizes{96, 128, 259}, Sizes{17, 384, 33}}) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(OC);
    auto x = random_vector(N * C, 15), w = random_vector(OC * C, 16);
    auto dy = random_vector(N * OC, 17);
    std::vector<double> dx(N * C, 0.25), dw(OC * C, -0.5);
    auto y = forward_double(x, w, N, C, OC);
    ops::cpu::matmul_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, C,
                                      OC);
    Tensor tx = f32_tensor(s, x, {N, C}), tw = f32_tensor(s, w, {OC, C});
    Tensor ty = f32_tensor(s, std::vector<double>(N * OC, -7.0), {N, OC});
    Tensor tdx = f32_tensor(s, std::vector<double>(N * C, 0.25), {N, C});
    Tensor tdw = f32_tensor(s, std::vector<double>(OC * C, -0.5), {OC, C});
    ops::matmul_forward(s, ty, tx, tw, N, C, OC);
    ops::matmul_backward(s, tdx, tdw, f32_tensor(s, dy, {N, OC}), tx, tw, N, C, OC);
    // fp32 inputs rounded from double and fp32 sums of up to 384 terms of size ~1.
    std::string why;
    CHECK_MESSAGE(all_close(f32_values(s, ty), y, 1e-5, 1e-5, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, tdx), dx, 1e-5, 1e-5, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, tdw), dw, 1e-5, 1e-5, &why), why);
  }
}

namespace {
// One GEMM job of the thread test: forward and backward of one shape and dtype.
struct GemmJob {
  int64_t N, C, OC;
  bool bf16;
  std::vector<float> x, w, dy, y, dx, dw;
  std::vector<ops::cpu::bf16> xb, wb, dyb;

  GemmJob(int64_t n, int64_t c, int64_t oc, bool use_bf16, uint64_t seed)
      : N(n), C(c), OC(oc), bf16(use_bf16) {
    x = cast_vector<float>(random_vector(N * C, seed));
    w = cast_vector<float>(random_vector(OC * C, seed + 1));
    dy = cast_vector<float>(random_vector(N * OC, seed + 2));
    auto rounded = [](const std::vector<float>& v) {
      std::vector<ops::cpu::bf16> b;
      for (float f : v) b.push_back({float_to_bf16(f)});
      return b;
    };
    xb = rounded(x), wb = rounded(w), dyb = rounded(dy);
  }
  void run() {
    y.assign(N * OC, 0.0f), dx.assign(N * C, 0.0f), dw.assign(OC * C, 0.0f);
    if (bf16) {
      ops::cpu::matmul_forward(y.data(), xb.data(), wb.data(), N, C, OC);
      ops::cpu::matmul_backward(dx.data(), dw.data(), dyb.data(), xb.data(), wb.data(), N, C, OC);
    } else {
      ops::cpu::matmul_forward(y.data(), x.data(), w.data(), N, C, OC);
      ops::cpu::matmul_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, C, OC);
    }
  }
  std::vector<float> bits() const {
    std::vector<float> all = y;
    all.insert(all.end(), dx.begin(), dx.end());
    all.insert(all.end(), dw.begin(), dw.end());
    return all;
  }
};
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

// The GEMM primitives are shared by every device thread (Note [oneDNN GEMMs in
// device threads]): concurrent calls, of the same shape and of different ones,
// must not disturb each other's scratchpads or results.
TEST_CASE("matmul GEMMs from two threads at once give the bits of one thread") {
  std::vector<GemmJob> jobs[2];
  jobs[0].emplace_back(64, 128, 259, true, 20), jobs[0].emplace_back(37, 130, 70, false, 30);
  jobs[1].emplace_back(64, 128, 259, true, 40), jobs[1].emplace_back(128, 384, 128, true, 50);
  jobs[1].emplace_back(37, 130, 70, false, 60);
  std::vector<std::vector<float>> expected[2];
  for (int t = 0; t < 2; ++t) {
    for (GemmJob& j : jobs[t]) j.run(), expected[t].push_back(j.bits());
  }
  int mismatches[2] = {0, 0};  // workers record, the test thread asserts
  auto worker = [&](int t) {
    for (int rep = 0; rep < 20; ++rep) {
      for (size_t i = 0; i < jobs[t].size(); ++i) {
        jobs[t][i].run();
        if (!same_bits(jobs[t][i].bits(), expected[t][i])) ++mismatches[t];
      }
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join(), b.join();
  CHECK(mismatches[0] == 0);
  CHECK(mismatches[1] == 0);
}

TEST_CASE("matmul backward with an undefined dweight still computes dinp") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 5, C = 6, OC = 7;
  auto x = random_vector(N * C, 31), w = random_vector(OC * C, 32), dy = random_vector(N * OC, 33);
  std::vector<double> dx(N * C, 0.0), dw(OC * C, 0.0), dx_only(N * C, 0.0);
  ops::cpu::matmul_backward<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, C, OC);
  ops::cpu::matmul_backward<double>(dx_only.data(), nullptr, dy.data(), x.data(), w.data(), N, C,
                                    OC);
  CHECK(dx_only == dx);
  Tensor tdx = f32_tensor(s, std::vector<double>(N * C, 0.0), {N, C});
  ops::matmul_backward(s, tdx, Tensor(), f32_tensor(s, dy, {N, OC}), f32_tensor(s, x, {N, C}),
                       f32_tensor(s, w, {OC, C}), N, C, OC);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, tdx), dx, 1e-5, 1e-6, &why), why);
}

TEST_CASE("matmul weight gradient by rows equals the rows of the whole weight gradient") {
  // zero2/zero3 produce a large weight's gradient in parts, reading dout in place.
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, C, OC] : {Sizes{7, 33, 17}, Sizes{37, 130, 70}, Sizes{1, 5, 3}}) {
    CAPTURE(N);
    CAPTURE(OC);
    auto x = random_vector(N * C, 41), dy = random_vector(N * OC, 42);
    std::vector<double> dw(OC * C, 0.0);
    ops::cpu::matmul_backward<double>(nullptr, dw.data(), dy.data(), x.data(),
                                      random_vector(OC * C, 43).data(), N, C, OC);
    Tensor tdy = f32_tensor(s, dy, {N, OC}), tx = f32_tensor(s, x, {N, C});
    for (auto [row0, rows] :
         {std::pair<int64_t, int64_t>{0, OC}, {0, 1}, {OC / 3, OC / 2 + 1}, {OC - 1, 1}, {OC, 0}}) {
      CAPTURE(row0);
      CAPTURE(rows);
      // Prior values accumulate; the double version of the same op agrees exactly.
      std::vector<double> want(dw.begin() + row0 * C, dw.begin() + (row0 + rows) * C);
      for (double& v : want) v += 0.5;
      std::vector<double> d(rows * C, 0.5);
      ops::cpu::matmul_backward_weight_rows<double>(d.data(), dy.data(), x.data(), N, C, OC, row0,
                                                    rows);
      std::string why;
      CHECK_MESSAGE(all_close(d, want, 1e-12, 1e-12, &why), why);
      if (rows == 0) continue;
      Tensor t = f32_tensor(s, std::vector<double>(rows * C, 0.5), {rows, C});
      ops::matmul_backward_weight_rows(s, t, tdy, tx, N, C, OC, row0, rows);
      CHECK_MESSAGE(all_close(f32_values(s, t), want, 1e-5, 1e-5, &why), why);
    }
  }
}

TEST_CASE("matmul backward overwriting dinp equals adding onto zeros, whatever dinp held") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (DType x : {DType::f32, DType::bf16}) check_dinp_overwrite(s, x);
}
