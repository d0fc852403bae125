#pragma once
// The CPU GEMMs of ops/cpu/matmul.cpp as oneDNN matmul primitives: one primitive
// per shape, layout, dtypes and accumulate flag, created once and shared by every
// device thread, each run single-threaded on the thread that calls it
// (Note [oneDNN GEMMs in device threads] in matmul_dnnl.cpp).

#include <cstdint>
#include <string>

#include "engine/core/dtype.h"

namespace fanout::ops::cpu {

// C (M, N) = A (M, K) B (K, N), or C += A B when `accumulate`; row-major. a_trans:
// A is stored as (K, M); b_trans: B is stored as (N, K). A and B have dtype `in`
// (f32 or bf16), C has dtype `out` (f32, or bf16 when not accumulating). Every
// dimension is positive. lda: the distance between A's stored rows in elements
// (0: dense, K or, transposed, M), so A can be a block of columns of a wider matrix;
// ldc: the distance between C's rows (0: N), so C can be padded logits whose
// columns N..ldc are never touched.
struct GemmDesc {
  int64_t M = 0, N = 0, K = 0;
  bool a_trans = false, b_trans = false;
  DType in = DType::f32, out = DType::f32;
  bool accumulate = false;
  int64_t lda = 0, ldc = 0;
  int64_t a_stride() const { return lda > 0 ? lda : (a_trans ? M : K); }
  int64_t c_stride() const { return ldc > 0 ? ldc : N; }
  auto operator<=>(const GemmDesc&) const = default;
};

void gemm_dnnl(const GemmDesc& g, const void* A, const void* B, void* C);

// Whether oneDNN runs bf16 GEMMs on bf16 instructions (AVX512-BF16 or AMX) here,
// after any ONEDNN_MAX_CPU_ISA cap. Without them its bf16 matmul is an emulation
// (oneDNN 2.6: 3x slower than fp32 on AVX-512) or missing (AVX2).
bool dnnl_has_bf16_instructions();

// oneDNN's name for the implementation it picked for `g`, e.g.
// "brg:avx512_core_bf16", and its effective ISA: for tests and `fanout bench ops`.
std::string gemm_dnnl_impl(const GemmDesc& g);
std::string dnnl_cpu_isa_name();

}  // namespace fanout::ops::cpu
