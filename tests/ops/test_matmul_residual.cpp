// matmul_forward_residual, the residual add folded into the output projection:
// on CPU bit-identical to matmul_forward then residual_forward (what the model ran
// before), in f32 and bf16, with out aliasing residual; close to a double oracle.

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "engine/core/check.h"
#include "ops/cpu/matmul.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "tests/ops/bf16_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct Sizes {
  int64_t N, C, OC;
};
const Sizes kSizes[] = {{1, 1, 1}, {7, 33, 17}, {12, 40, 9}, {37, 130, 70}, {64, 256, 259}};
}  // namespace

TEST_CASE("matmul_forward_residual has the bits of matmul_forward then residual_forward") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, C, OC] : kSizes) {
    for (DType in : {DType::f32, DType::bf16}) {
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(OC);
      CAPTURE(dtype_name(in));
      Tensor x = float_tensor(s, in, random_vector(N * C, 1), {N, C});
      Tensor w = float_tensor(s, in, random_vector(OC * C, 2), {OC, C});
      const std::vector<double> r = random_vector(N * OC, 3, -4.0, 4.0);
      // The two ops of today's model.
      Tensor product = f32_tensor(s, std::vector<double>(N * OC, 0.0), {N, OC});
      Tensor two_ops = f32_tensor(s, r, {N, OC});
      ops::matmul_forward(s, product, x, w, N, C, OC);
      ops::residual_forward(s, two_ops, two_ops, product, N * OC);
      const std::vector<float> want = tensor_to_vector<float>(s, two_ops);
      // Into a separate out, and in place (out == residual).
      Tensor residual = f32_tensor(s, r, {N, OC});
      Tensor out = f32_tensor(s, std::vector<double>(N * OC, -7.0), {N, OC});
      ops::matmul_forward_residual(s, out, residual, x, w, N, C, OC);
      CHECK(tensor_to_vector<float>(s, out) == want);
      CHECK(f32_values(s, residual) == f32_values(s, f32_tensor(s, r, {N, OC})));  // unchanged
      ops::matmul_forward_residual(s, residual, residual, x, w, N, C, OC);
      CHECK(tensor_to_vector<float>(s, residual) == want);
      REQUIRE(max_abs(f32_values(s, product)) > 0.1);
    }
  }
}

// Against the double formula on the same (bf16-rounded) inputs: fp32 sums of C
// products of size ~1 and one fp32 add of the residual, well inside 1e-5.
TEST_CASE("matmul_forward_residual adds the residual to inp weight^T") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 37, C = 130, OC = 70;
  for (DType in : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(in));
    auto x = bf16_rounded(random_vector(N * C, 4)), w = bf16_rounded(random_vector(OC * C, 5));
    auto r = random_vector(N * OC, 6);
    std::vector<double> want(N * OC);
    ops::cpu::matmul_forward<double>(want.data(), x.data(), w.data(), N, C, OC);
    for (int64_t i = 0; i < N * OC; ++i) want[i] += static_cast<float>(r[i]);
    Tensor out = f32_tensor(s, r, {N, OC});
    ops::matmul_forward_residual(s, out, out, float_tensor(s, in, x, {N, C}),
                                 float_tensor(s, in, w, {OC, C}), N, C, OC);
    std::string why;
    CHECK_MESSAGE(all_close(f32_values(s, out), want, 1e-5, 1e-5 * max_abs(want), &why), why);
  }
}

TEST_CASE("matmul_forward_residual with no input channels copies the residual") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 3, OC = 4;
  const std::vector<double> r = random_vector(N * OC, 7);
  Tensor one = f32_tensor(s, {1.0}, {1});
  Tensor out = f32_tensor(s, std::vector<double>(N * OC, -7.0), {N, OC});
  ops::matmul_forward_residual(s, out, f32_tensor(s, r, {N, OC}), one, one, N, 0, OC);
  CHECK(f32_values(s, out) == f32_values(s, f32_tensor(s, r, {N, OC})));
}

TEST_CASE("matmul_forward_residual refuses a bf16 residual or out") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Tensor xb = bf16_tensor(s, {1, 2, 3, 4}, {2, 2}), xf = f32_tensor(s, {1, 2, 3, 4}, {2, 2});
  CHECK_THROWS_AS(ops::matmul_forward_residual(s, xb, xf, xb, xb, 2, 2, 2), InternalError);
  CHECK_THROWS_AS(ops::matmul_forward_residual(s, xf, xb, xb, xb, 2, 2, 2), InternalError);
  CHECK_THROWS_AS(ops::matmul_forward_residual(s, xf, xf, xb, xf, 2, 2, 2), InternalError);
  s.synchronize();
}
