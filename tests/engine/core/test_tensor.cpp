// Tensors: shapes, dim-0 slices and views sharing storage, copies between devices.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

using namespace fanout;

TEST_CASE("slices along dim 0 share storage and see the right rows") {
  Stream s(cpu_device(0), "cpu:0 test");
  std::vector<float> v(10 * 3);
  std::iota(v.begin(), v.end(), 0.f);
  Tensor t = tensor_from_vector(s, v, {10, 3}, DType::f32, cpu_device(0));
  Tensor rows = t.slice(3, 6);
  CHECK(rows.shape() == Shape{3, 3});
  CHECK(rows.storage() == t.storage());
  CHECK(rows.data<float>()[0] == 9.f);
  auto back = tensor_to_vector<float>(s, rows);
  CHECK(back == std::vector<float>(v.begin() + 9, v.begin() + 18));
  CHECK(t.slice(10, 10).numel() == 0);
  CHECK(t.view(4, {2, 2}).data<float>()[3] == 7.f);
  CHECK(t.reshape({30}).dim() == 1);
}

TEST_CASE("copies between CPU devices move the bytes and keep dtypes apart") {
  Stream s(cpu_device(0), "cpu:0 test");
  for (DType dt : {DType::f32, DType::bf16, DType::i32, DType::i64, DType::u16}) {
    CAPTURE(dtype_name(dt));
    Tensor a = Tensor::empty({7, 5}, dt, cpu_device(0));
    Tensor b = Tensor::empty({7, 5}, dt, cpu_device(1));
    CHECK(a.nbytes() == 35 * dtype_size(dt));
    auto* pa = static_cast<unsigned char*>(a.raw());
    for (size_t i = 0; i < a.nbytes(); ++i) pa[i] = static_cast<unsigned char>(i * 7 + 1);
    tensor_copy(s, b, a);
    s.synchronize();
    CHECK(std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
    CHECK(b.device() == cpu_device(1));
  }
}

TEST_CASE("bf16 conversion rounds to nearest even and round-trips bf16 values") {
  CHECK(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  CHECK(bf16_to_float(float_to_bf16(-2.5f)) == -2.5f);
  // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties go to the even (1.0)
  CHECK(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
  // 1 + 3*2^-8 is half-way between 1+2^-7 and 1+2^-6: ties to even -> 1 + 2^-6
  CHECK(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 1.0f / 64);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  CHECK(std::isinf(bf16_to_float(float_to_bf16(INFINITY))));
}

TEST_CASE("shape helpers") {
  CHECK(shape_str({2, 3}) == "[2, 3]");
  CHECK(shape_numel({2, 3, 4}) == 24);
  CHECK(shape_numel({}) == 1);
  CHECK_THROWS_AS(Tensor::empty({-1}, DType::f32, cpu_device(0)), Error);
  Tensor t = Tensor::empty({2, 3}, DType::f32, cpu_device(0));
  CHECK(t.str() == "f32[2, 3] on cpu:0");
}
