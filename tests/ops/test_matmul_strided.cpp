// matmul with padded rows (the LM head's logits, rows vocab_padded(V) apart):
// forward writing out's rows ld_out apart, backward reading dout's rows ld_dout
// apart, in f32 and bf16, equal to the dense ops on small integers (every sum exact
// in fp32) and never touching the padding columns, which hold a sentinel.

#include <doctest/doctest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "engine/core/check.h"
#include "ops/gemm_plan.h"
#include "ops/matmul.h"
#include "tests/ops/bf16_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

// Exact in bf16 (7 significant bits) and far from any product sum here: read as
// data, it would change a result; overwritten, it would be gone.
constexpr double kSentinel = -1000.0;

struct Sizes {
  int64_t N, C, OC;
};
const Sizes kSizes[] = {{1, 1, 1}, {7, 33, 17}, {5, 16, 259}, {3, 9, 64}};

std::vector<double> small_ints(size_t n, uint64_t seed) {
  std::vector<double> v = random_vector(n, seed, -4.0, 5.0);
  for (double& x : v) x = std::floor(x);
  return v;
}

// (N, OC) values as rows ld apart, the padding (the last row's too: N * ld
// elements, as the ops require) holding the sentinel.
std::vector<double> to_padded(const std::vector<double>& dense, int64_t N, int64_t OC, int64_t ld) {
  std::vector<double> p(N * ld, kSentinel);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) p[n * ld + o] = dense[n * OC + o];
  return p;
}

// The valid columns back as (N, OC), and whether every padding element is the sentinel.
std::vector<double> from_padded(const std::vector<double>& p, int64_t N, int64_t OC, int64_t ld,
                                bool* padding_intact) {
  std::vector<double> dense(N * OC);
  *padding_intact = true;
  for (int64_t i = 0; i < static_cast<int64_t>(p.size()); ++i) {
    const int64_t n = i / ld, o = i % ld;
    if (o < OC) {
      dense[n * OC + o] = p[i];
    } else if (p[i] != kSentinel) {
      *padding_intact = false;
    }
  }
  return dense;
}

}  // namespace

TEST_CASE("matmul forward with ld_out writes the dense result and leaves the padding") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, C, OC] : kSizes) {
    for (auto [in, out_dtype] : {std::pair{DType::f32, DType::f32},
                                 {DType::bf16, DType::f32},
                                 {DType::bf16, DType::bf16}}) {
      const int64_t ld = ops::vocab_padded(OC);
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(OC);
      CAPTURE(dtype_name(in));
      CAPTURE(dtype_name(out_dtype));
      Tensor x = float_tensor(s, in, small_ints(N * C, 1), {N, C});
      Tensor w = float_tensor(s, in, small_ints(OC * C, 2), {OC, C});
      Tensor dense = float_tensor(s, out_dtype, std::vector<double>(N * OC, 0.0), {N, OC});
      ops::matmul_forward(s, dense, x, w, N, C, OC);
      std::vector<double> want = float_values(s, dense);
      REQUIRE(max_abs(want) > 0);
      const int64_t extent = N * ld;
      // Junk in the valid columns: forward must overwrite them.
      Tensor out = float_tensor(s, out_dtype,
                                to_padded(std::vector<double>(N * OC, 3.0), N, OC, ld), {extent});
      ops::matmul_forward(s, out, x, w, N, C, OC, ld);
      bool intact = false;
      CHECK(from_padded(float_values(s, out), N, OC, ld, &intact) == want);
      CHECK(intact);
    }
  }
}

TEST_CASE("matmul forward with ld_out and no input channels zeroes only the valid columns") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 3, OC = 5, ld = 64;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor one = float_tensor(s, dt, {1.0}, {1});
    Tensor out =
        float_tensor(s, dt, to_padded(std::vector<double>(N * OC, 3.0), N, OC, ld), {N * ld});
    ops::matmul_forward(s, out, one, one, N, 0, OC, ld);
    bool intact = false;
    CHECK(from_padded(float_values(s, out), N, OC, ld, &intact) == std::vector<double>(N * OC));
    CHECK(intact);
  }
}

TEST_CASE("matmul backward with ld_dout equals the dense backward and ignores the padding") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, C, OC] : kSizes) {
    for (DType in : {DType::f32, DType::bf16}) {
      const int64_t ld = ops::vocab_padded(OC);
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(OC);
      CAPTURE(dtype_name(in));
      auto x = small_ints(N * C, 3), w = small_ints(OC * C, 4), dy = small_ints(N * OC, 5);
      auto dx0 = small_ints(N * C, 6), dw0 = small_ints(OC * C, 7);  // priors: += keeps them
      Tensor tx = float_tensor(s, in, x, {N, C}), tw = float_tensor(s, in, w, {OC, C});
      Tensor dense_dx = f32_tensor(s, dx0, {N, C}), dense_dw = f32_tensor(s, dw0, {OC, C});
      ops::matmul_backward(s, dense_dx, dense_dw, float_tensor(s, in, dy, {N, OC}), tx, tw, N, C,
                           OC);
      Tensor dx = f32_tensor(s, dx0, {N, C}), dw = f32_tensor(s, dw0, {OC, C});
      Tensor tdy = float_tensor(s, in, to_padded(dy, N, OC, ld), {N * ld});
      ops::matmul_backward(s, dx, dw, tdy, tx, tw, N, C, OC, ld);
      REQUIRE(f32_values(s, dense_dw) != dw0);
      CHECK(f32_values(s, dx) == f32_values(s, dense_dx));
      CHECK(f32_values(s, dw) == f32_values(s, dense_dw));
      // Rows of the weight gradient from the same padded dout, row0 > 0 included.
      std::vector<double> whole = f32_values(s, dense_dw);
      for (auto [row0, rows] : {std::pair<int64_t, int64_t>{0, OC}, {OC / 2, OC - OC / 2}}) {
        if (rows == 0) continue;
        CAPTURE(row0);
        std::vector<double> prior(dw0.begin() + row0 * C, dw0.begin() + (row0 + rows) * C);
        Tensor part = f32_tensor(s, prior, {rows, C});
        ops::matmul_backward_weight_rows(s, part, tdy, tx, N, C, OC, row0, rows, ld);
        CHECK(f32_values(s, part) ==
              std::vector<double>(whole.begin() + row0 * C, whole.begin() + (row0 + rows) * C));
      }
    }
  }
}

TEST_CASE("matmul refuses a leading dimension below OC or a tensor short of the padded extent") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 2, C = 3, OC = 5, ld = 64;
  Tensor x = f32_tensor(s, std::vector<double>(N * C, 1.0), {N, C});
  Tensor w = f32_tensor(s, std::vector<double>(OC * C, 1.0), {OC, C});
  Tensor whole = f32_tensor(s, std::vector<double>(N * ld, 0.0), {N * ld});
  CHECK_THROWS_AS(ops::matmul_forward(s, whole, x, w, N, C, OC, 4), InternalError);
  // The last row's padding is required too: cuBLASLt loads whole strides.
  for (int64_t extent : {(N - 1) * ld + OC, N * ld - 1}) {
    CAPTURE(extent);
    Tensor out = f32_tensor(s, std::vector<double>(extent, 0.0), {extent});
    CHECK_THROWS_AS(ops::matmul_forward(s, out, x, w, N, C, OC, ld), InternalError);
    CHECK_THROWS_AS(ops::matmul_backward(s, x, w, out, x, w, N, C, OC, ld), InternalError);
    CHECK_THROWS_AS(ops::matmul_backward_weight_rows(s, w, out, x, N, C, OC, 0, OC, ld),
                    InternalError);
  }
  CHECK_THROWS_AS(ops::matmul_backward_weight_rows(s, w, whole, x, N, C, OC, 0, OC, 3),
                  InternalError);
  ops::matmul_forward(s, whole, x, w, N, C, OC, ld);  // N * ld: accepted
  s.synchronize();
}
