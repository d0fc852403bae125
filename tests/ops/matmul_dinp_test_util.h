#pragma once
// matmul_backward's Dinp::overwrite against Dinp::add onto zeros on the same
// stream: the same values, whatever dinp held before (NaN), and an empty sum
// (OC = 0) writes zeros. For CPU and CUDA streams alike. Inline only, like
// cuda_op_test_util.h.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops/matmul.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"

namespace fanout::test {

inline void check_dinp_overwrite(Stream& s, DType X) {
  CAPTURE(std::string(dtype_name(X)));
  struct Sizes {
    int64_t N, C, OC;
  };
  for (auto [N, C, OC] : {Sizes{3, 5, 7}, Sizes{17, 33, 65}, Sizes{4, 6, 0}}) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(OC);
    // Buffers of one element at least: an empty sum still takes defined tensors.
    const int64_t nw = std::max<int64_t>(OC * C, 1), ndy = std::max<int64_t>(N * OC, 1);
    Tensor x = float_tensor(s, X, bf16_rounded(random_vector(N * C, 1)), {N * C});
    Tensor w = float_tensor(s, X, bf16_rounded(random_vector(nw, 2)), {nw});
    Tensor dy = float_tensor(s, X, bf16_rounded(random_vector(ndy, 3)), {ndy});
    Tensor added = f32_tensor(s, std::vector<double>(N * C, 0.0), {N * C});
    Tensor over = f32_tensor(s, std::vector<double>(N * C, std::nan("")), {N * C});
    Tensor dw_a = f32_tensor(s, std::vector<double>(nw, 0.5), {nw});
    Tensor dw_o = f32_tensor(s, std::vector<double>(nw, 0.5), {nw});
    ops::matmul_backward(s, added, dw_a, dy, x, w, N, C, OC);
    ops::matmul_backward(s, over, dw_o, dy, x, w, N, C, OC, 0, ops::Dinp::overwrite);
    const std::vector<double> ref = f32_values(s, added), got = f32_values(s, over);
    if (OC > 0) CHECK(max_abs(ref) > 0.01);
    CHECK(got == ref);
    // the weight gradient still adds to what it held
    CHECK(f32_values(s, dw_o) == f32_values(s, dw_a));
  }
}

}  // namespace fanout::test
