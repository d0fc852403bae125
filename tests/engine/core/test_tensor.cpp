// Tensors: shapes, dim-0 slices and views sharing storage, copies between devices.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/core/check.h"
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

TEST_CASE("tensor_copy_rows moves a column block between row strides and nothing else") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t rows = 4, cols = 3, src_ld = 7, dst_ld = 5;
  std::vector<float> src(rows * src_ld);
  std::iota(src.begin(), src.end(), 1.0f);
  Tensor src_t = tensor_from_vector(s, src, {rows * src_ld}, DType::f32, cpu_device(0));
  Tensor dst_t = tensor_from_vector(s, std::vector<float>(rows * dst_ld, -1.0f), {rows * dst_ld},
                                    DType::f32, cpu_device(0));
  // columns [2, 5) of the source rows into columns [1, 4) of the destination's
  tensor_copy_rows(s, dst_t.view(1, {rows * dst_ld - 1}), dst_ld,
                   src_t.view(2, {rows * src_ld - 2}), src_ld, rows, cols);
  std::vector<float> got = tensor_to_vector<float>(s, dst_t), expected(rows * dst_ld, -1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) expected[r * dst_ld + 1 + c] = src[r * src_ld + 2 + c];
  CHECK(got == expected);
  // refusals: a stride under the row, a view too short, dtypes that differ
  CHECK_THROWS_AS(tensor_copy_rows(s, dst_t, 2, src_t, src_ld, rows, cols), InternalError);
  CHECK_THROWS_AS(tensor_copy_rows(s, dst_t.view(6, {14}), dst_ld, src_t, src_ld, rows, cols),
                  InternalError);  // 3 * 5 + 3 = 18 elements needed
  Tensor bf = Tensor::empty({rows * dst_ld}, DType::bf16, cpu_device(0));
  CHECK_THROWS_AS(tensor_copy_rows(s, bf, dst_ld, src_t, src_ld, rows, cols), InternalError);
  CHECK_NOTHROW(tensor_copy_rows(s, dst_t, dst_ld, src_t, src_ld, 0, cols));
}
