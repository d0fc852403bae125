#pragma once
// Helpers for the bf16 op tests: values rounded to bf16 (the inputs a bf16 op and
// its fp32 twin share), bf16 tensors on a CPU device, and the tolerance of one
// rounding to bf16. Inline only, like cuda_op_test_util.h.

#include <cstdint>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "tests/ops/op_test_util.h"

namespace fanout::test {

// One round-to-nearest-even to bf16 moves a value by at most half a unit in its 8th
// significant bit: 2^-9 of its magnitude. 2^-8 leaves room for the last-bit
// differences of the fp32 math the two sides do (a different FMA contraction, or
// float against double); a second rounding, or math in bf16, would exceed it.
constexpr double kBf16Rtol = 1.0 / 256;
// Two roundings to bf16 of fp32 values a few ulp apart (different summation orders
// on two devices) land on the same bf16 or on neighbours: one bf16 step, at most
// 2^-7 of the value.
constexpr double kBf16Step = 1.0 / 128;

// x rounded to the nearest bf16 (through float), as doubles: exact in f32 and bf16.
inline std::vector<double> bf16_rounded(const std::vector<double>& x) {
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    r[i] = bf16_to_float(float_to_bf16(static_cast<float>(x[i])));
  }
  return r;
}

// A bf16 tensor holding `values` rounded to bf16.
inline Tensor bf16_tensor(Stream& stream, const std::vector<double>& values, Shape shape) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(static_cast<float>(values[i]));
  return tensor_from_vector(stream, bits, shape, DType::bf16, stream.device());
}

// The raw bits and the values of a bf16 tensor.
inline std::vector<uint16_t> bf16_bits(Stream& stream, const Tensor& t) {
  return tensor_to_vector<uint16_t>(stream, t);
}
inline std::vector<double> bf16_values(Stream& stream, const Tensor& t) {
  std::vector<double> r;
  for (uint16_t b : bf16_bits(stream, t)) r.push_back(bf16_to_float(b));
  return r;
}

// f32 or bf16 tensors through one call, for loops over dtype combinations.
inline Tensor float_tensor(Stream& stream, DType dtype, const std::vector<double>& values,
                           Shape shape) {
  return dtype == DType::bf16 ? bf16_tensor(stream, values, shape)
                              : f32_tensor(stream, values, shape);
}

inline std::vector<double> float_values(Stream& stream, const Tensor& t) {
  return t.dtype() == DType::bf16 ? bf16_values(stream, t) : f32_values(stream, t);
}

// Each element of `bf16` is the nearest bf16 to the matching f32 value: exactly
// float_to_bf16 of it (the bf16 op is its fp32 twin rounded once at the store).
inline bool bf16_is_rounding_of(const std::vector<double>& bf16, const std::vector<double>& f32,
                                size_t* first_bad = nullptr) {
  for (size_t i = 0; i < f32.size(); ++i) {
    double expected = bf16_to_float(float_to_bf16(static_cast<float>(f32[i])));
    if (!(bf16[i] == expected)) {
      if (first_bad) *first_bad = i;
      return false;
    }
  }
  return bf16.size() == f32.size();
}

}  // namespace fanout::test
