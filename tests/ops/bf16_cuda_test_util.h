#pragma once
// Helpers for the bf16 GPU op tests: the same bf16-rounded values on cpu:0 and
// cuda:0, and closeness checks whose absolute tolerance scales with the reference
// (bf16 results near cancellation carry the rounding of their larger terms).
// Inline only, like cuda_op_test_util.h.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/ops/bf16_test_util.h"
#include "tests/ops/cuda_op_test_util.h"

namespace fanout::test {

// One bf16 tensor with the same contents on cpu:0 and cuda:0.
inline TensorPair bf16_pair(CpuAndCuda& s, const std::vector<double>& values, Shape shape) {
  return {bf16_tensor(s.cpu, values, shape), bf16_tensor(s.gpu, values, shape)};
}

// CHECKs |got - ref| <= atol_frac * max|ref| + rtol * |ref| element-wise, and that
// the reference is not all zeros.
inline void check_close_scaled(const std::vector<double>& got, const std::vector<double>& ref,
                               double rtol, double atol_frac, const char* what) {
  CAPTURE(what);
  const double scale = max_abs(ref);
  CHECK(scale > 0);
  std::string why;
  CHECK_MESSAGE(all_close(got, ref, rtol, atol_frac * scale, &why), why);
}

// A float tensor's values (f32 or bf16) from whichever stream holds it.
inline std::vector<double> values_of(Stream& stream, const Tensor& t) {
  return float_values(stream, t);
}

}  // namespace fanout::test
