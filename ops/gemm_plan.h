#pragma once
// The host side of the CUDA GEMMs, pure C++ so the CPU suite tests it in every
// build: each matmul op as one column-major GEMM (ops/cuda/matmul.cu issues exactly
// these), the key of the cuBLASLt plan cache with the pointer alignment class in it,
// the workspace size, the fallback line, vocab_padded for the LM head's logits, and
// the process's choice of algorithm (heuristic or timed) with the timed pick.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace fanout::ops {

// V rounded up to a multiple of 64: the distance between the rows of the padded
// logits (16-byte-aligned rows in f32 and bf16, GEMM-friendly strides). V >= 1.
int64_t vocab_padded(int64_t V);

// ---

// One GEMM as cuBLAS sees it, column-major: D (m, n) = op(A) op(B) + beta C, op(A)
// (m, k), op(B) (k, n), C and D laid out alike with columns ldc apart. B starts
// b_offset elements past the operand's base pointer (a block of dout's columns).
// Note [Row-major ops as column-major GEMMs] in gemm_plan.cpp.
struct ColMajorGemm {
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t b_offset = 0;
  bool operator==(const ColMajorGemm&) const = default;
};

// out (N, OC), rows ld_out apart, = inp (N, C) weight (OC, C)^T.
// A = weight, B = inp, C/D = out.
ColMajorGemm gemm_plan_forward(int64_t N, int64_t C, int64_t OC, int64_t ld_out);

// dinp (N, C) (+)= dout (N, OC; rows ld_dout apart) weight (OC, C).
// A = weight, B = dout, C/D = dinp.
ColMajorGemm gemm_plan_backward_inp(int64_t N, int64_t C, int64_t OC, int64_t ld_dout);

// dweight[row0 : row0 + rows] (rows, C) (+)= dout[:, row0 : row0 + rows]^T inp (N, C),
// dout's rows ld_dout apart; the whole gradient is rows [0, OC).
// A = inp, B = dout + b_offset, C/D = the gradient rows.
ColMajorGemm gemm_plan_backward_weight(int64_t N, int64_t C, int64_t row0, int64_t rows,
                                       int64_t ld_dout);

// ---

// The largest of 16, 8, 4, 2, 1 bytes that divides every address (a null pointer
// divides by all): cuBLASLt's heuristic picks kernels by the alignment promised
// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), and vectorised kernels need it.
int gemm_alignment(std::initializer_list<const void*> pointers);

// What a cuBLASLt plan is chosen for: one heuristic query per distinct key.
// epilogue holds a cublasLtEpilogue_t value (plain C++ here).
struct GemmKey {
  int device = -1;
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  DType a = DType::bf16, b = DType::bf16, c = DType::f32, d = DType::f32;
  bool beta_zero = true;
  int epilogue = 0;
  int alignment = 16;  // gemm_alignment of A, B, C and D together
  bool operator==(const GemmKey&) const = default;
};

GemmKey gemm_key(int device, const ColMajorGemm& g, DType ab, DType cd, bool beta_zero,
                 int epilogue, int alignment);

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const;
};

// ---

// The cuBLASLt workspace per stream for a device of compute capability major.cc:
// 32 MiB on Hopper and later, 4 MiB before, as the cuBLAS documentation recommends.
size_t gemm_workspace_bytes(int cc_major);

// The line printed once per shape when cuBLASLt refuses one and cublasGemmEx runs it.
std::string gemm_fallback_message(const ColMajorGemm& g, const char* status);

// ---

// How cuBLASLt's algorithm is chosen for each bf16 GEMM shape, for this process:
// heuristic (its first answer; the default, and reproducible from run to run) or
// timed (its kGemmCandidates best answers each timed once, at the shape's first
// eager use, the fastest kept). Note [Timed GEMM algorithms] in gemm_cublas.cu.
enum class GemmAlgoChoice { heuristic, timed };

constexpr int kGemmCandidates = 8;
// A timed candidate replaces the heuristic's first answer only when faster by more
// than this share, so that timing noise does not swap equals.
constexpr double kGemmTimedMargin = 0.03;

void gemm_set_algo_choice(GemmAlgoChoice choice);
GemmAlgoChoice gemm_algo_choice();

// "heuristic" or "timed"; `flag` names the option in the error.
GemmAlgoChoice gemm_algo_choice_parse(const std::string& text, const char* flag);

// The candidate to keep from their times in ms (negative: the candidate refused
// the shape): the fastest, unless candidate 0 (the heuristic's first answer) ran
// and the fastest beats it by at most `margin` of its time. -1 when none ran.
int gemm_pick(const std::vector<double>& ms, double margin);

}  // namespace fanout::ops
