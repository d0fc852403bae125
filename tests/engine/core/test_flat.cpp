// Flat-buffer fill / add / scale on CPU devices, exact on small integers, sizes
// around the parallel grain.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/dtype.h"
#include "engine/core/flat.h"

using namespace fanout;

TEST_CASE("flat fill add and scale are exact on small integers") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t n : {1, 7, 65536, 65537, 300001}) {
    CAPTURE(n);
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i)
      a[i] = static_cast<float>(i % 13), b[i] = static_cast<float>(i % 5);
    Tensor ta = tensor_from_vector(s, a, {n}, DType::f32, cpu_device(0));
    Tensor tb = tensor_from_vector(s, b, {n}, DType::f32, cpu_device(0));
    flat_add(s, ta, tb);
    flat_scale(s, ta, 2.0f);
    auto out = tensor_to_vector<float>(s, ta);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) ok &= out[i] == 2.0f * (a[i] + b[i]);
    CHECK(ok);
    flat_fill(s, tb, -3.0f);
    auto filled = tensor_to_vector<float>(s, tb);
    CHECK(std::all_of(filled.begin(), filled.end(), [](float v) { return v == -3.0f; }));
  }
}

TEST_CASE("flat_round_bf16 rounds like float_to_bf16 and flat_add sums bf16 into f32") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t n : {1, 65537, 200003}) {
    CAPTURE(n);
    std::vector<float> src(n), acc(n);
    for (int64_t i = 0; i < n; ++i) {
      src[i] =
          std::ldexp(1.0f + static_cast<float>(i % 977) / 977.0f, static_cast<int>(i % 40) - 20);
      if (i % 2) src[i] = -src[i];
      acc[i] = static_cast<float>(i % 7);
    }
    src[0] = std::numeric_limits<float>::quiet_NaN();
    Tensor t_src = tensor_from_vector(s, src, {n}, DType::f32, cpu_device(0));
    Tensor t_b16 = Tensor::empty({n}, DType::bf16, cpu_device(0));
    Tensor t_acc = tensor_from_vector(s, acc, {n}, DType::f32, cpu_device(0));
    flat_round_bf16(s, t_b16, t_src);
    std::vector<uint16_t> bits = tensor_to_vector<uint16_t>(s, t_b16);
    bool same = true;
    for (int64_t i = 0; i < n; ++i) same &= bits[i] == float_to_bf16(src[i]);
    CHECK(same);
    CHECK(std::isnan(bf16_to_float(bits[0])));
    flat_add(s, t_acc, t_b16);  // acc += bf16 values, summed in fp32
    std::vector<float> out = tensor_to_vector<float>(s, t_acc);
    bool summed = true;
    for (int64_t i = 1; i < n; ++i) summed &= out[i] == acc[i] + bf16_to_float(bits[i]);
    CHECK(summed);
  }
}

TEST_CASE(
    "flat_add_round_bf16 is one fp32 add of rounded values, rounded, flat_widen_bf16 is exact") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t n : {1, 65537, 200003}) {
    CAPTURE(n);
    std::vector<float> src(n);
    std::vector<uint16_t> acc(n);
    for (int64_t i = 0; i < n; ++i) {
      src[i] = std::ldexp(1.0f + static_cast<float>(i % 613) / 613.0f, static_cast<int>(i % 9) - 4);
      if (i % 3 == 0) src[i] = -src[i];
      acc[i] = float_to_bf16(static_cast<float>(i % 11) - 5.0f + 1.0f / 256);
    }
    Tensor t_src = tensor_from_vector(s, src, {n}, DType::f32, cpu_device(0));
    Tensor t_acc = tensor_from_vector(s, acc, {n}, DType::bf16, cpu_device(0));
    Tensor t_src16 = Tensor::empty({n}, DType::bf16, cpu_device(0));
    flat_round_bf16(s, t_src16, t_src);
    flat_add_round_bf16(s, t_acc, t_src);    // acc = round(acc + round(src))
    flat_add_round_bf16(s, t_acc, t_src16);  // a bf16 src is its own rounding
    std::vector<uint16_t> out = tensor_to_vector<uint16_t>(s, t_acc);
    bool ok = true, changed = false;
    for (int64_t i = 0; i < n; ++i) {
      const float r = bf16_to_float(float_to_bf16(src[i]));
      const uint16_t once = float_to_bf16(bf16_to_float(acc[i]) + r);
      ok &= out[i] == float_to_bf16(bf16_to_float(once) + r);
      changed |= out[i] != acc[i];
    }
    CHECK(ok);
    CHECK(changed);
    Tensor wide = Tensor::empty({n}, DType::f32, cpu_device(0));
    flat_widen_bf16(s, wide, t_acc);
    std::vector<float> w = tensor_to_vector<float>(s, wide);
    bool exact = true;
    for (int64_t i = 0; i < n; ++i) exact &= w[i] == bf16_to_float(out[i]);
    CHECK(exact);
  }
}
