// GPU: norm_squared on cuda:0 against the CPU dispatcher, for sizes from 0 to
// past one block's share, plus NaN propagation and overflow to Inf.

#include <doctest/doctest.h>

#include <cmath>

#include "ops/grad_norm.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
float norm_squared_on(Stream& stream, const std::vector<double>& values, int64_t n) {
  Tensor buf = f32_tensor(stream, values, {static_cast<int64_t>(values.size())});
  Tensor out = f32_tensor(stream, {-1.0}, {1});
  ops::norm_squared(stream, out, buf, n);
  return tensor_to_vector<float>(stream, out)[0];
}
}  // namespace

TEST_CASE("norm_squared on cuda:0 matches the CPU and is deterministic") {
  CpuAndCuda s;
  for (int64_t n : {0, 1, 1000, 262145, (1 << 22) + 3}) {
    CAPTURE(n);
    auto x = random_vector(std::max<int64_t>(n, 1), 1);
    const float ref = norm_squared_on(s.cpu, x, n);
    const float got = norm_squared_on(s.gpu, x, n);
    CHECK(std::abs(got - ref) <= 1e-6 * std::abs(ref));
    CHECK(norm_squared_on(s.gpu, x, n) == got);  // same bits again
    if (n == 0) CHECK(got == 0.0f);
  }
}

TEST_CASE("norm_squared on cuda:0 propagates NaN and overflows to Inf") {
  CpuAndCuda s;
  std::vector<double> x(5000, 0.5);
  x[1234] = NAN;
  CHECK(std::isnan(norm_squared_on(s.gpu, x, 5000)));
  x[1234] = 1e20;  // 1e40 is past float's range
  CHECK(std::isinf(norm_squared_on(s.gpu, x, 5000)));
}
