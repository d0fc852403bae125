#pragma once
// Helpers for the bf16 matmul GPU tests (test_matmul_bf16_cuda.cpp): f32 or bf16
// tensors on cpu:0 and cuda:0 alike, at an element offset to break 16-byte
// alignment, padded rows with a sentinel, and the tolerance of a bf16 GEMM's
// fp32 sum computed in two orders. Inline only, like cuda_op_test_util.h.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/ops/bf16_test_util.h"
#include "tests/ops/cuda_op_test_util.h"

namespace fanout::test {

// Exact in bf16; read as data or overwritten, it shows.
constexpr double kMatmulSentinel = -1000.0;

// Note [bf16 GEMM tolerance on cuda:0]
// Both sides multiply the same bf16 values exactly in fp32 and sum K products in
// fp32, in different orders (tiles, split-K, tensor-core adders that may truncate
// instead of round: take u = 2^-22 rather than 2^-24). Inputs are uniform in
// [-1, 1], so partial sums random-walk to about sqrt(K)/3 and K roundings of that
// size add up to about sqrt(K) * u * sqrt(K)/3 ~ K * 8e-8 (2.5e-4 at K = 3072).
// atol = 1e-4 * sqrt(K) (5.5e-3 at K = 3072; results there are ~18) leaves a
// factor of 20 and is still 1000x below what a wrong layout, transpose or offset
// gives (errors of the order of the result itself). rtol 1e-4 covers the added
// priors and residuals (~1). A bf16 out rounds each side's fp32 value once; two
// nearly equal values can land one bf16 ulp apart, 2^-7 relative: 2 * kBf16Rtol.
inline double gemm_atol(int64_t K) {
  return 1e-4 * std::sqrt(static_cast<double>(K > 0 ? K : 1));
}
constexpr double kGemmRtol = 1e-4;
inline double gemm_rtol(DType out) {
  return out == DType::bf16 ? 2 * kBf16Rtol : kGemmRtol;
}

// The same values as dtype `dtype` on both devices, starting `offset` elements
// into their allocation (offset 1 of bf16: 2-byte aligned; of f32: 4-byte).
inline TensorPair float_pair(CpuAndCuda& s, DType dtype, const std::vector<double>& values,
                             Shape shape, int64_t offset = 0) {
  std::vector<double> stored(offset, kMatmulSentinel);
  stored.insert(stored.end(), values.begin(), values.end());
  const int64_t n = static_cast<int64_t>(stored.size());
  Tensor cpu = float_tensor(s.cpu, dtype, stored, {n}),
         gpu = float_tensor(s.gpu, dtype, stored, {n});
  return {cpu.view(offset, shape), gpu.view(offset, shape)};
}

// CHECKs the cuda tensor (f32 or bf16) against the cpu one within atol + rtol|ref|,
// and that the reference is not all zeros.
inline void check_float_close(CpuAndCuda& s, const TensorPair& t, double rtol, double atol,
                              const char* what) {
  CAPTURE(what);
  std::vector<double> ref = float_values(s.cpu, t.cpu), got = float_values(s.gpu, t.gpu);
  CHECK(max_abs(ref) > 0);
  std::string why;
  CHECK_MESSAGE(all_close(got, ref, rtol, atol, &why), why);
}

// (N, OC) values as rows ld apart with the sentinel between and after: N * ld
// elements, as the ops require of padded rows (ops/matmul.h).
inline std::vector<double> padded_rows(const std::vector<double>& dense, int64_t N, int64_t OC,
                                       int64_t ld) {
  std::vector<double> p(N * ld, kMatmulSentinel);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) p[n * ld + o] = dense[n * OC + o];
  return p;
}

// Whether every element between the valid columns of padded rows is the sentinel.
inline bool padding_intact(const std::vector<double>& p, int64_t OC, int64_t ld) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (static_cast<int64_t>(i) % ld >= OC && p[i] != kMatmulSentinel) return false;
  }
  return true;
}

}  // namespace fanout::test
