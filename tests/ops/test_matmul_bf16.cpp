// bf16 matmul (the bf16 contract: bf16 inputs, fp32 accumulation, f32 or bf16
// out, f32 gradients accumulated) against the double-precision oracle (OpenBLAS
// dgemm) on the same bf16-rounded inputs: exact on small integers, within fp32
// accumulation error on random values, one rounding for bf16 out. Also: +=,
// undefined dinp, empty sizes, the dtype checks, and which path runs. The ctest
// entry matmul.isa_avx2 reruns these with oneDNN capped to AVX2 (the widened path).

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "engine/core/check.h"
#include "ops/cpu/matmul.h"
#include "ops/matmul.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

struct Sizes {
  int64_t N, C, OC;
};
// 1, sizes off every block multiple, and one of the tiny preset's (lm_head).
const Sizes kSizes[] = {{1, 1, 1}, {7, 33, 17}, {12, 40, 9}, {37, 130, 70}, {96, 128, 259}};

std::vector<uint16_t> bf16_bits(const std::vector<double>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(static_cast<float>(v[i]));
  return out;
}

std::vector<double> bf16_rounded(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(float_to_bf16(float(v[i])));
  return out;
}

Tensor bf16_tensor(Stream& s, const std::vector<double>& v, Shape shape) {
  return tensor_from_vector(s, bf16_bits(v), std::move(shape), DType::bf16, s.device());
}

std::vector<double> bf16_values(Stream& s, const Tensor& t) {
  std::vector<double> out;
  for (uint16_t b : tensor_to_vector<uint16_t>(s, t)) out.push_back(bf16_to_float(b));
  return out;
}

// Small integers: exact in bf16, and every product and partial sum exact in fp32.
std::vector<double> small_ints(size_t n, uint64_t seed) {
  std::vector<double> v = random_vector(n, seed, -4.0, 5.0);
  for (double& x : v) x = std::floor(x);
  return v;
}

// The oracle on the given (already bf16-exact) values, gradients onto priors.
struct Expected {
  std::vector<double> out, dinp, dweight;
};
Expected oracle(const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>& dy, std::vector<double> dx_prior,
                std::vector<double> dw_prior, Sizes sz) {
  Expected e{std::vector<double>(sz.N * sz.OC), std::move(dx_prior), std::move(dw_prior)};
  ops::cpu::matmul_forward<double>(e.out.data(), x.data(), w.data(), sz.N, sz.C, sz.OC);
  ops::cpu::matmul_backward<double>(e.dinp.data(), e.dweight.data(), dy.data(), x.data(), w.data(),
                                    sz.N, sz.C, sz.OC);
  return e;
}

// The same four results through the op dispatch, from bf16 inputs.
Expected run_bf16(Stream& s, const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>& dy, const std::vector<double>& dx_prior,
                  const std::vector<double>& dw_prior, Sizes sz, std::vector<double>* out_bf16) {
  auto [N, C, OC] = sz;
  Tensor tx = bf16_tensor(s, x, {N, C}), tw = bf16_tensor(s, w, {OC, C});
  Tensor ty = f32_tensor(s, std::vector<double>(N * OC, -7.0), {N, OC});  // junk: overwritten
  Tensor tyb = bf16_tensor(s, std::vector<double>(N * OC, -7.0), {N, OC});
  Tensor tdx = f32_tensor(s, dx_prior, {N, C}), tdw = f32_tensor(s, dw_prior, {OC, C});
  ops::matmul_forward(s, ty, tx, tw, N, C, OC);
  ops::matmul_forward(s, tyb, tx, tw, N, C, OC);
  ops::matmul_backward(s, tdx, tdw, bf16_tensor(s, dy, {N, OC}), tx, tw, N, C, OC);
  *out_bf16 = bf16_values(s, tyb);
  return {f32_values(s, ty), f32_values(s, tdx), f32_values(s, tdw)};
}

}  // namespace

TEST_CASE("matmul bf16 on small integers is exact, gradients accumulating onto priors") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (Sizes sz : kSizes) {
    auto [N, C, OC] = sz;
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(OC);
    auto x = small_ints(N * C, 1), w = small_ints(OC * C, 2), dy = small_ints(N * OC, 3);
    auto dx0 = small_ints(N * C, 4), dw0 = small_ints(OC * C, 5);  // priors: += must keep them
    Expected want = oracle(x, w, dy, dx0, dw0, sz);
    std::vector<double> out_bf16;
    Expected got = run_bf16(s, x, w, dy, dx0, dw0, sz, &out_bf16);
    CHECK(got.out == want.out);
    CHECK(got.dinp == want.dinp);
    CHECK(got.dweight == want.dweight);
    // bf16 out: the exact sum rounded once (sums past 256 need rounding).
    CHECK(out_bf16 == bf16_rounded(want.out));
  }
}

// Random values: the oracle sums the same bf16 products in double, so the only
// difference is fp32 accumulation (about sqrt(K) * 2^-24 of the terms' size):
// atol = 1e-5 x the output's largest magnitude, rtol = 1e-5. bf16 out adds one
// round-to-nearest-even, at most 2^-9 relative: rtol 2^-8 leaves room for both.
TEST_CASE("matmul bf16 matches its fp32 twin on the same rounded inputs") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (Sizes sz : kSizes) {
    auto [N, C, OC] = sz;
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(OC);
    auto x = bf16_rounded(random_vector(N * C, 6)), w = bf16_rounded(random_vector(OC * C, 7));
    auto dy = bf16_rounded(random_vector(N * OC, 8));
    auto dx0 = random_vector(N * C, 9), dw0 = random_vector(OC * C, 10);
    Expected want = oracle(x, w, dy, dx0, dw0, sz);
    std::vector<double> out_bf16;
    Expected got = run_bf16(s, x, w, dy, dx0, dw0, sz, &out_bf16);
    // The fp32 twin: the f32 dispatch on the same values meets the same bound.
    Tensor tx = f32_tensor(s, x, {N, C}), tw = f32_tensor(s, w, {OC, C});
    Tensor ty = f32_tensor(s, std::vector<double>(N * OC, 0.0), {N, OC});
    Tensor tdx = f32_tensor(s, dx0, {N, C}), tdw = f32_tensor(s, dw0, {OC, C});
    ops::matmul_forward(s, ty, tx, tw, N, C, OC);
    ops::matmul_backward(s, tdx, tdw, f32_tensor(s, dy, {N, OC}), tx, tw, N, C, OC);
    REQUIRE(max_abs(want.out) > 0.1);
    std::string why;
    auto close = [&](const std::vector<double>& a, const std::vector<double>& e, double rtol) {
      return all_close(a, e, rtol, 1e-5 * max_abs(e), &why);
    };
    CHECK_MESSAGE(close(got.out, want.out, 1e-5), why);
    CHECK_MESSAGE(close(got.dinp, want.dinp, 1e-5), why);
    CHECK_MESSAGE(close(got.dweight, want.dweight, 1e-5), why);
    CHECK_MESSAGE(close(out_bf16, want.out, 1.0 / 256), why);
    CHECK_MESSAGE(close(f32_values(s, ty), want.out, 1e-5), why);
    CHECK_MESSAGE(close(f32_values(s, tdx), want.dinp, 1e-5), why);
    CHECK_MESSAGE(close(f32_values(s, tdw), want.dweight, 1e-5), why);
  }
}

TEST_CASE("matmul bf16 backward adds to the gradients, and an undefined dinp is skipped") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const Sizes sz{37, 130, 70};
  auto [N, C, OC] = sz;
  auto x = small_ints(N * C, 11), w = small_ints(OC * C, 12), dy = small_ints(N * OC, 13);
  Tensor tx = bf16_tensor(s, x, {N, C}), tw = bf16_tensor(s, w, {OC, C});
  Tensor tdy = bf16_tensor(s, dy, {N, OC});
  Tensor tdw = f32_tensor(s, std::vector<double>(OC * C, 0.0), {OC, C});
  // Twice into one dweight, with no dinp: 2x the product, exactly.
  ops::matmul_backward(s, Tensor(), tdw, tdy, tx, tw, N, C, OC);
  ops::matmul_backward(s, Tensor(), tdw, tdy, tx, tw, N, C, OC);
  Expected once = oracle(x, w, dy, std::vector<double>(N * C), std::vector<double>(OC * C), sz);
  std::vector<double> twice = once.dweight;
  for (double& v : twice) v *= 2;
  REQUIRE(max_abs(once.dweight) > 1);
  CHECK(f32_values(s, tdw) == twice);
}

TEST_CASE("matmul bf16 with no rows or no input channels") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t C = 5, OC = 3, N = 4;
  Tensor w = bf16_tensor(s, small_ints(OC * C, 14), {OC, C});
  Tensor dw = f32_tensor(s, std::vector<double>(OC * C, 0.5), {OC, C});
  Tensor one = bf16_tensor(s, {1.0}, {1});
  // N = 0: nothing to write, dweight += an empty sum.
  ops::matmul_forward(s, Tensor::empty({1}, DType::f32, s.device()), one, w, 0, C, OC);
  ops::matmul_backward(s, Tensor(), dw, one, one, w, 0, C, OC);
  CHECK(f32_values(s, dw) == std::vector<double>(OC * C, 0.5));
  // C = 0: out is an empty sum, zero (overwriting the junk).
  Tensor y = bf16_tensor(s, std::vector<double>(N * OC, -7.0), {N, OC});
  ops::matmul_forward(s, y, one, one, N, 0, OC);
  CHECK(bf16_values(s, y) == std::vector<double>(N * OC, 0.0));
}

TEST_CASE("matmul bf16 refuses mixed dtypes") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Tensor xb = bf16_tensor(s, {1, 2, 3, 4}, {2, 2}), xf = f32_tensor(s, {1, 2, 3, 4}, {2, 2});
  Tensor yb = bf16_tensor(s, {0, 0, 0, 0}, {2, 2}), yf = f32_tensor(s, {0, 0, 0, 0}, {2, 2});
  CHECK_THROWS_AS(ops::matmul_forward(s, yf, xb, xf, 2, 2, 2), InternalError);
  CHECK_THROWS_AS(ops::matmul_forward(s, yb, xf, xf, 2, 2, 2), InternalError);  // f32 in, bf16 out
  CHECK_THROWS_AS(ops::matmul_backward(s, yf, yb, xb, xb, xb, 2, 2, 2), InternalError);  // dweight
  CHECK_THROWS_AS(ops::matmul_backward(s, yf, yf, xf, xb, xb, 2, 2, 2), InternalError);
  s.synchronize();
}

TEST_CASE("matmul bf16 runs natively only with bf16 instructions, as ONEDNN_MAX_CPU_ISA allows") {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  MESSAGE("bf16 GEMMs: ", ops::cpu::matmul_engine(DType::bf16),
          "; fp32: ", ops::cpu::matmul_engine(DType::f32));
  // The ctest entry matmul.isa_avx2 sets the cap: the widened path must be what ran.
  if (cap != nullptr && (std::string(cap) == "AVX2" || std::string(cap) == "AVX512_CORE")) {
    CHECK_FALSE(ops::cpu::matmul_bf16_native());
  }
}

TEST_CASE("matmul bf16 weight gradient by rows equals the rows of the whole weight gradient") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 19, C = 40, OC = 23;
  auto x = bf16_rounded(random_vector(N * C, 51)), dy = bf16_rounded(random_vector(N * OC, 52));
  auto w = bf16_rounded(random_vector(OC * C, 53));
  Tensor tx = bf16_tensor(s, x, {N, C}), tdy = bf16_tensor(s, dy, {N, OC});
  Tensor whole = f32_tensor(s, std::vector<double>(OC * C, 0.0), {OC, C});
  ops::matmul_backward(s, Tensor(), whole, tdy, tx, bf16_tensor(s, w, {OC, C}), N, C, OC);
  std::vector<double> all = f32_values(s, whole);
  for (auto [row0, rows] : {std::pair<int64_t, int64_t>{0, 8}, {8, 8}, {16, 7}}) {
    CAPTURE(row0);
    Tensor t = f32_tensor(s, std::vector<double>(rows * C, 0.0), {rows, C});
    ops::matmul_backward_weight_rows(s, t, tdy, tx, N, C, OC, row0, rows);
    std::vector<double> want(all.begin() + row0 * C, all.begin() + (row0 + rows) * C);
    std::string why;
    CHECK_MESSAGE(all_close(f32_values(s, t), want, 1e-5, 1e-6, &why), why);
  }
}
