#include "ops/gemm_plan.h"

#include <atomic>
#include <functional>
#include <limits>

#include "engine/core/check.h"

namespace fanout::ops {

// Note [Row-major ops as column-major GEMMs]
// cuBLAS is column-major: a row-major (R, K) matrix with rows ld apart is the
// column-major (K, R) matrix with leading dimension ld, i.e. its transpose. So
// each row-major product Y = A B is issued as Y^T = B^T A^T:
//   out^T (OC, N)        = W (OC, C)     inp^T (C, N)      -> (T, N, OC, N, C)
//   dinp^T (C, N)       += W^T (C, OC)   dout^T (OC, N)    -> (N, N, C, N, OC)
//   dweight^T (C, rows) += inp^T (C, N)  dout block (N, rows) -> (N, T, C, rows, N)
// The padded logits (rows ld apart, ld >= OC) are a leading dimension and no
// more: columns OC..ld of out are never written and those of dout never read.
// A block of weight-gradient rows reads dout's columns row0.. in place, B
// starting row0 elements in.

int64_t vocab_padded(int64_t V) {
  FANOUT_CHECK(V >= 1, "vocab_padded: V = ", V, ", expected at least 1");
  FANOUT_CHECK(V <= std::numeric_limits<int64_t>::max() - 63, "vocab_padded: V = ", V,
               " overflows when rounded up to a multiple of 64");
  return (V + 63) / 64 * 64;
}

// ---

ColMajorGemm gemm_plan_forward(int64_t N, int64_t C, int64_t OC, int64_t ld_out) {
  FANOUT_ASSERT(ld_out >= OC, "matmul_forward: ld_out ", ld_out, " < OC ", OC);
  return {
      .transa = true, .transb = false, .m = OC, .n = N, .k = C, .lda = C, .ldb = C, .ldc = ld_out};
}

ColMajorGemm gemm_plan_backward_inp(int64_t N, int64_t C, int64_t OC, int64_t ld_dout) {
  FANOUT_ASSERT(ld_dout >= OC, "matmul_backward: ld_dout ", ld_dout, " < OC ", OC);
  return {.transa = false,
          .transb = false,
          .m = C,
          .n = N,
          .k = OC,
          .lda = C,
          .ldb = ld_dout,
          .ldc = C};
}

ColMajorGemm gemm_plan_backward_weight(int64_t N, int64_t C, int64_t row0, int64_t rows,
                                       int64_t ld_dout) {
  FANOUT_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= ld_dout, "matmul_backward: rows [", row0,
                ", ", row0 + rows, ") past ld_dout ", ld_dout);
  return {.transa = false,
          .transb = true,
          .m = C,
          .n = rows,
          .k = N,
          .lda = C,
          .ldb = ld_dout,
          .ldc = C,
          .b_offset = row0};
}

// ---

int gemm_alignment(std::initializer_list<const void*> pointers) {
  int align = 16;
  for (const void* p : pointers) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    while (align > 1 && a % static_cast<uintptr_t>(align) != 0) align /= 2;
  }
  return align;
}

GemmKey gemm_key(int device, const ColMajorGemm& g, DType ab, DType cd, bool beta_zero,
                 int epilogue, int alignment) {
  return {.device = device,
          .transa = g.transa,
          .transb = g.transb,
          .m = g.m,
          .n = g.n,
          .k = g.k,
          .lda = g.lda,
          .ldb = g.ldb,
          .ldc = g.ldc,
          .a = ab,
          .b = ab,
          .c = cd,
          .d = cd,
          .beta_zero = beta_zero,
          .epilogue = epilogue,
          .alignment = alignment};
}

size_t GemmKeyHash::operator()(const GemmKey& k) const {
  // boost::hash_combine's mixing over every field that operator== compares.
  size_t h = 0;
  auto mix = [&h](uint64_t v) {
    h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<uint64_t>(k.device));
  mix((uint64_t{k.transa} << 1) | uint64_t{k.transb} | (uint64_t{k.beta_zero} << 2));
  for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldc}) mix(static_cast<uint64_t>(v));
  for (DType t : {k.a, k.b, k.c, k.d}) mix(static_cast<uint64_t>(t));
  mix(static_cast<uint64_t>(k.epilogue));
  mix(static_cast<uint64_t>(k.alignment));
  return h;
}

// ---

size_t gemm_workspace_bytes(int cc_major) {
  return cc_major >= 9 ? size_t{32} << 20 : size_t{4} << 20;
}

std::string gemm_fallback_message(const ColMajorGemm& g, const char* status) {
  return detail::str_cat("matmul: cuBLASLt has no algorithm for M=", g.m, " N=", g.n, " K=", g.k,
                         " (", status, "); using cublasGemmEx");
}

// ---

namespace {
std::atomic<GemmAlgoChoice> g_algo_choice{GemmAlgoChoice::heuristic};
}  // namespace

void gemm_set_algo_choice(GemmAlgoChoice choice) {
  g_algo_choice.store(choice, std::memory_order_relaxed);
}

GemmAlgoChoice gemm_algo_choice() {
  return g_algo_choice.load(std::memory_order_relaxed);
}

GemmAlgoChoice gemm_algo_choice_parse(const std::string& text, const char* flag) {
  FANOUT_CHECK(text == "heuristic" || text == "timed", flag, " must be heuristic or timed, got '",
               text, "'");
  return text == "timed" ? GemmAlgoChoice::timed : GemmAlgoChoice::heuristic;
}

int gemm_pick(const std::vector<double>& ms, double margin) {
  int best = -1;
  for (size_t i = 0; i < ms.size(); ++i) {
    if (ms[i] >= 0 && (best < 0 || ms[i] < ms[best])) best = static_cast<int>(i);
  }
  if (best > 0 && ms[0] >= 0 && ms[best] >= ms[0] * (1.0 - margin)) return 0;
  return best;
}

}  // namespace fanout::ops
