#pragma once
// The row-strided forms of the element-wise ops that the fused q/k/v and gate/up
// projections read and write (Note [Fused projections] in models/llama_model.cpp)
// against their contiguous forms on the same stream: the same bits where the op
// writes, and nothing written anywhere else (the buffers start as junk). One
// check per op, for CPU and CUDA streams alike. Inline only, like
// cuda_op_test_util.h.

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"

namespace fanout::test {

constexpr double kJunk = 7.25;  // what the strided buffers hold where nothing is written

// Rows `rows` x `cols` at column c0 of a buffer with rows ld apart, copied out.
inline std::vector<double> take_block(const std::vector<double>& buf, int64_t rows, int64_t cols,
                                      int64_t ld, int64_t c0) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out.push_back(buf[r * ld + c0 + c]);
  return out;
}

// `block` laid at column c0 of `buf` (rows ld apart).
inline void put_block(std::vector<double>& buf, const std::vector<double>& block, int64_t rows,
                      int64_t cols, int64_t ld, int64_t c0) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) buf[r * ld + c0 + c] = block[r * cols + c];
}

inline Tensor from_offset(const Tensor& t, int64_t offset) {
  return t.view(offset, {t.numel() - offset});
}

// SwiGLU over rows: gate at column 0 and up at column up_col of rows ld apart
// (the fused layout is up_col = cols, ld = 2 cols), in dtype X, dout in G.
inline void check_swiglu_rows(Stream& s, DType X, DType G, int64_t rows, int64_t cols, int64_t ld,
                              int64_t up_col) {
  CAPTURE(std::string(dtype_name(X)));
  CAPTURE(std::string(dtype_name(G)));
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(ld);
  REQUIRE(up_col >= cols);
  REQUIRE(up_col + cols <= ld);
  const Device d = s.device();
  auto gu = bf16_rounded(random_vector(rows * ld, 11, -6, 6));
  Tensor gu_t = float_tensor(s, X, gu, {rows * ld});
  Tensor gate_c = float_tensor(s, X, take_block(gu, rows, cols, ld, 0), {rows * cols});
  Tensor up_c = float_tensor(s, X, take_block(gu, rows, cols, ld, up_col), {rows * cols});
  const int64_t n = rows * cols;
  Tensor out_c = Tensor::empty({n}, X, d), out = float_tensor(s, X, std::vector(n, kJunk), {n});
  ops::swiglu_forward(s, out_c, gate_c, up_c, n);
  ops::swiglu_forward_rows(s, out, gu_t, from_offset(gu_t, up_col), rows, cols, ld);
  const std::vector<double> ref = float_values(s, out_c);
  REQUIRE(max_abs(ref) > 0.1);
  CHECK(float_values(s, out) == ref);

  auto dy = bf16_rounded(random_vector(n, 12));
  Tensor dout = float_tensor(s, G, dy, {n});
  Tensor dg_c = Tensor::empty({n}, X, d), du_c = Tensor::empty({n}, X, d);
  ops::swiglu_backward(s, dg_c, du_c, dout, gate_c, up_c, n);
  Tensor dgu = float_tensor(s, X, std::vector(rows * ld, kJunk), {rows * ld});
  ops::swiglu_backward_rows(s, dgu, from_offset(dgu, up_col), dout, gu_t, from_offset(gu_t, up_col),
                            rows, cols, ld);
  std::vector<double> expected(rows * ld, kJunk);
  put_block(expected, float_values(s, dg_c), rows, cols, ld, 0);
  put_block(expected, float_values(s, du_c), rows, cols, ld, up_col);
  REQUIRE(max_abs(float_values(s, dg_c)) > 0.1);
  CHECK(float_values(s, dgu) == expected);
}

// RoPE reading q and k from (and writing their gradients into) rows of the fused
// q/k/v layout: [q (H D) | k (KV D) | v (KV D)] per (b, t).
inline void check_rope_rows(Stream& s, DType X, int64_t B, int64_t T, int64_t H, int64_t KV,
                            int64_t D) {
  CAPTURE(std::string(dtype_name(X)));
  CAPTURE(T);
  CAPTURE(D);
  const Device d = s.device();
  const int64_t N = B * T, Hd = H * D, KVd = KV * D, QKV = Hd + 2 * KVd;
  const ops::RopeFreq freq = 10000.0;
  auto qkv = bf16_rounded(random_vector(N * QKV, 21, -2, 2));
  Tensor qkv_t = float_tensor(s, X, qkv, {N * QKV});
  for (auto [heads, col] : {std::pair{H, int64_t{0}}, std::pair{KV, Hd}}) {
    CAPTURE(col);
    const int64_t w = heads * D;
    Tensor x_c = float_tensor(s, X, take_block(qkv, N, w, QKV, col), {N * w});
    Tensor y_c = Tensor::empty({N * w}, X, d);
    Tensor y = float_tensor(s, X, std::vector(N * w, kJunk), {N * w});
    ops::rope_forward(s, y_c, x_c, B, T, heads, D, freq, 3);
    ops::rope_forward(s, y, from_offset(qkv_t, col), B, T, heads, D, freq, 3, 0, QKV);
    REQUIRE(max_abs(float_values(s, y_c)) > 0.1);
    CHECK(float_values(s, y) == float_values(s, y_c));
    // backward: a contiguous gradient into the rows, the rest untouched
    Tensor dx_c = Tensor::empty({N * w}, X, d);
    ops::rope_backward(s, dx_c, y_c, B, T, heads, D, freq, 3);
    Tensor dqkv = float_tensor(s, X, std::vector(N * QKV, kJunk), {N * QKV});
    ops::rope_backward(s, from_offset(dqkv, col), y_c, B, T, heads, D, freq, 3, QKV, 0);
    std::vector<double> expected(N * QKV, kJunk);
    put_block(expected, float_values(s, dx_c), N, w, QKV, col);
    CHECK(float_values(s, dqkv) == expected);
  }
}

// tensor_copy_rows out of and back into the v columns of q/k/v rows.
inline void check_copy_rows(Stream& s, DType X, int64_t N, int64_t Hd, int64_t KVd) {
  CAPTURE(std::string(dtype_name(X)));
  const int64_t QKV = Hd + 2 * KVd, col = Hd + KVd;
  auto qkv = bf16_rounded(random_vector(N * QKV, 31, -2, 2));
  Tensor qkv_t = float_tensor(s, X, qkv, {N * QKV});
  Tensor v = float_tensor(s, X, std::vector(N * KVd, kJunk), {N * KVd});
  tensor_copy_rows(s, v, KVd, from_offset(qkv_t, col), QKV, N, KVd);
  CHECK(float_values(s, v) == take_block(qkv, N, KVd, QKV, col));
  Tensor back = float_tensor(s, X, std::vector(N * QKV, kJunk), {N * QKV});
  tensor_copy_rows(s, from_offset(back, col), QKV, v, KVd, N, KVd);
  std::vector<double> expected(N * QKV, kJunk);
  put_block(expected, take_block(qkv, N, KVd, QKV, col), N, KVd, QKV, col);
  CHECK(float_values(s, back) == expected);
}

}  // namespace fanout::test
