// The host side of the CUDA GEMMs (ops/gemm_plan.h), in every build: each op's
// column-major GEMM run through a column-major reference in double must give the
// row-major op (padded rows and row blocks included, padding untouched); the
// plan cache key, alignment classes, workspace size, fallback line, vocab_padded;
// which timed candidate is kept, and the --gemm-algo values.

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/core/check.h"
#include "ops/gemm_plan.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::ops;
using namespace fanout::test;

namespace {

constexpr double kSentinel = -12345.0;

// C (m, n) = op(A) op(B) + beta C as cuBLAS defines it, column-major, in double.
void colmajor_gemm(const ColMajorGemm& g, const double* A, const double* B, double beta,
                   double* C) {
  B += g.b_offset;
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      double sum = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double a = g.transa ? A[p + i * g.lda] : A[i + p * g.lda];
        const double b = g.transb ? B[j + p * g.ldb] : B[p + j * g.ldb];
        sum += a * b;
      }
      C[i + j * g.ldc] = beta * C[i + j * g.ldc] + sum;
    }
  }
}

// dout (N, OC) with rows ld apart, the padding columns holding the sentinel.
std::vector<double> padded(const std::vector<double>& dense, int64_t N, int64_t OC, int64_t ld) {
  std::vector<double> p(N * ld, kSentinel);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) p[n * ld + o] = dense[n * OC + o];
  return p;
}

struct Sizes {
  int64_t N, C, OC;
};
const Sizes kSizes[] = {{1, 1, 1}, {3, 5, 7}, {7, 33, 17}, {4, 8, 259}};

}  // namespace

TEST_CASE("gemm plans map the row-major ops to the documented cuBLAS arguments") {
  CHECK(gemm_plan_forward(4, 8, 259, 320) ==
        ColMajorGemm{.transa = true, .m = 259, .n = 4, .k = 8, .lda = 8, .ldb = 8, .ldc = 320});
  CHECK(gemm_plan_backward_inp(4, 8, 259, 320) ==
        ColMajorGemm{.m = 8, .n = 4, .k = 259, .lda = 8, .ldb = 320, .ldc = 8});
  CHECK(
      gemm_plan_backward_weight(4, 8, 64, 32, 320) ==
      ColMajorGemm{
          .transb = true, .m = 8, .n = 32, .k = 4, .lda = 8, .ldb = 320, .ldc = 8, .b_offset = 64});
  CHECK_THROWS_AS(gemm_plan_forward(4, 8, 259, 258), InternalError);
  CHECK_THROWS_AS(gemm_plan_backward_inp(4, 8, 259, 100), InternalError);
  CHECK_THROWS_AS(gemm_plan_backward_weight(4, 8, 300, 32, 320), InternalError);
}

TEST_CASE("gemm plan of the forward gives out = inp weight^T, padding columns untouched") {
  for (auto [N, C, OC] : kSizes) {
    for (int64_t ld : {OC, vocab_padded(OC)}) {
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(OC);
      CAPTURE(ld);
      auto x = random_vector(N * C, 1), w = random_vector(OC * C, 2);
      std::vector<double> want(N * OC, 0.0);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o)
          for (int64_t c = 0; c < C; ++c) want[n * OC + o] += x[n * C + c] * w[o * C + c];
      std::vector<double> out(N * ld, kSentinel);
      colmajor_gemm(gemm_plan_forward(N, C, OC, ld), w.data(), x.data(), 0.0, out.data());
      std::string why;
      CHECK_MESSAGE(all_close(out, padded(want, N, OC, ld), 1e-12, 1e-12, &why), why);
    }
  }
}

TEST_CASE("gemm plan of the input gradient adds dout weight, reading dout's rows ld apart") {
  for (auto [N, C, OC] : kSizes) {
    for (int64_t ld : {OC, vocab_padded(OC)}) {
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(OC);
      CAPTURE(ld);
      auto w = random_vector(OC * C, 3), dy = random_vector(N * OC, 4);
      auto dx = random_vector(N * C, 5);  // prior values: accumulated onto
      std::vector<double> want = dx;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t o = 0; o < OC; ++o) want[n * C + c] += dy[n * OC + o] * w[o * C + c];
      // The sentinel in dout's padding would show up in dinp if it were read.
      std::vector<double> dy_padded = padded(dy, N, OC, ld);
      colmajor_gemm(gemm_plan_backward_inp(N, C, OC, ld), w.data(), dy_padded.data(), 1.0,
                    dx.data());
      std::string why;
      CHECK_MESSAGE(all_close(dx, want, 1e-12, 1e-12, &why), why);
    }
  }
}

TEST_CASE("gemm plan of the weight gradient rows adds a block of dout^T inp") {
  for (auto [N, C, OC] : kSizes) {
    for (int64_t ld : {OC, vocab_padded(OC)}) {
      for (auto [row0, rows] :
           {std::pair<int64_t, int64_t>{0, OC}, {OC / 2, OC - OC / 2}, {OC - 1, 1}}) {
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(OC);
        CAPTURE(ld);
        CAPTURE(row0);
        auto x = random_vector(N * C, 6), dy = random_vector(N * OC, 7);
        auto dw = random_vector(rows * C, 8);
        std::vector<double> want = dw;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t n = 0; n < N; ++n) want[r * C + c] += dy[n * OC + row0 + r] * x[n * C + c];
        std::vector<double> dy_padded = padded(dy, N, OC, ld);
        colmajor_gemm(gemm_plan_backward_weight(N, C, row0, rows, ld), x.data(), dy_padded.data(),
                      1.0, dw.data());
        std::string why;
        CHECK_MESSAGE(all_close(dw, want, 1e-12, 1e-12, &why), why);
      }
    }
  }
}

TEST_CASE("gemm alignment class is the largest of 16, 8, 4, 2, 1 dividing every pointer") {
  auto p = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
  CHECK(gemm_alignment({p(0x1000)}) == 16);
  CHECK(gemm_alignment({p(0x1030)}) == 16);
  CHECK(gemm_alignment({p(0x1008)}) == 8);
  CHECK(gemm_alignment({p(0x1004)}) == 4);
  CHECK(gemm_alignment({p(0x100c)}) == 4);
  CHECK(gemm_alignment({p(0x1002)}) == 2);
  CHECK(gemm_alignment({p(0x1001)}) == 1);
  CHECK(gemm_alignment({nullptr}) == 16);
  // The minimum over all four operands.
  CHECK(gemm_alignment({p(0x1000), p(0x2000), p(0x3008), p(0x4000)}) == 8);
  CHECK(gemm_alignment({p(0x1000), p(0x2002), p(0x3008), p(0x4000)}) == 2);
  // A bf16 block of columns starting at an odd column breaks 4-byte alignment.
  const auto* base = reinterpret_cast<const uint16_t*>(0x10000);
  CHECK(gemm_alignment({base + 3}) == 2);
  CHECK(gemm_alignment({base + 64}) == 16);
}

TEST_CASE("gemm keys are equal exactly when every field is, with equal hashes") {
  const ColMajorGemm g = gemm_plan_forward(1024, 768, 3072, 3072);
  const GemmKey base = gemm_key(0, g, DType::bf16, DType::f32, true, 1, 16);
  CHECK(base == gemm_key(0, g, DType::bf16, DType::f32, true, 1, 16));
  CHECK(GemmKeyHash{}(base) == GemmKeyHash{}(gemm_key(0, g, DType::bf16, DType::f32, true, 1, 16)));
  CHECK(base.transa);
  CHECK(base.m == 3072);
  CHECK(base.ldc == 3072);
  CHECK(base.c == DType::f32);
  CHECK(base.d == DType::f32);
  // One field changed at a time: every one is a distinct key.
  std::vector<GemmKey> keys = {base};
  auto vary = [&](auto change) {
    GemmKey k = base;
    change(k);
    keys.push_back(k);
  };
  vary([](GemmKey& k) { k.device = 1; });
  vary([](GemmKey& k) { k.transa = false; });
  vary([](GemmKey& k) { k.transb = true; });
  vary([](GemmKey& k) { k.m += 1; });
  vary([](GemmKey& k) { k.n += 1; });
  vary([](GemmKey& k) { k.k += 1; });
  vary([](GemmKey& k) { k.lda += 1; });
  vary([](GemmKey& k) { k.ldb += 1; });
  vary([](GemmKey& k) { k.ldc += 64; });
  vary([](GemmKey& k) { k.a = DType::f32; });
  vary([](GemmKey& k) { k.b = DType::f32; });
  vary([](GemmKey& k) { k.c = DType::bf16; });
  vary([](GemmKey& k) { k.d = DType::bf16; });
  vary([](GemmKey& k) { k.beta_zero = false; });
  vary([](GemmKey& k) { k.epilogue = 2; });
  vary([](GemmKey& k) { k.alignment = 2; });
  for (size_t i = 1; i < keys.size(); ++i) {
    CAPTURE(i);
    CHECK_FALSE(keys[i] == base);
  }
  std::unordered_set<GemmKey, GemmKeyHash> set(keys.begin(), keys.end());
  CHECK(set.size() == keys.size());
  // The hash separates these (a constant hash would still be correct, but slow).
  std::unordered_set<size_t> hashes;
  for (const GemmKey& k : keys) hashes.insert(GemmKeyHash{}(k));
  CHECK(hashes.size() == keys.size());
}

TEST_CASE("gemm workspace is 32 MiB from Hopper on, 4 MiB before") {
  CHECK(gemm_workspace_bytes(9) == size_t{32} << 20);
  CHECK(gemm_workspace_bytes(10) == size_t{32} << 20);
  CHECK(gemm_workspace_bytes(8) == size_t{4} << 20);
  CHECK(gemm_workspace_bytes(7) == size_t{4} << 20);
}

TEST_CASE("gemm fallback line names the shape and the status") {
  CHECK(gemm_fallback_message(gemm_plan_forward(7, 33, 259, 320), "CUBLAS_STATUS_NOT_SUPPORTED") ==
        "matmul: cuBLASLt has no algorithm for M=259 N=7 K=33 (CUBLAS_STATUS_NOT_SUPPORTED); "
        "using cublasGemmEx");
}

TEST_CASE("gemm vocab_padded rounds V up to a multiple of 64") {
  CHECK(vocab_padded(1) == 64);
  CHECK(vocab_padded(63) == 64);
  CHECK(vocab_padded(64) == 64);
  CHECK(vocab_padded(65) == 128);
  CHECK(vocab_padded(259) == 320);
  CHECK(vocab_padded(50000) == 50048);
  CHECK(vocab_padded(50304) == 50304);
  CHECK_THROWS_AS(vocab_padded(0), Error);
  CHECK_THROWS_AS(vocab_padded(-5), Error);
  CHECK_THROWS_AS(vocab_padded(std::numeric_limits<int64_t>::max()), Error);
  CHECK(vocab_padded(std::numeric_limits<int64_t>::max() - 63) % 64 == 0);
}

TEST_CASE("gemm_pick keeps the heuristic's first answer unless another beats it by the margin") {
  const double m = kGemmTimedMargin;
  CHECK(gemm_pick({1.0, 0.99, 1.2}, m) == 0);  // within the margin: timing noise
  CHECK(gemm_pick({1.0, 0.9, 0.95}, m) == 1);  // the fastest, by more than it
  CHECK(gemm_pick({1.0, 0.95, 0.9}, m) == 2);
  CHECK(gemm_pick({1.0}, m) == 0);
  CHECK(gemm_pick({1.0, 1.0 * (1 - m)}, m) == 0);  // exactly the margin is not enough
  CHECK(gemm_pick({1.0, 0.5}, 0.0) == 1);
  // A candidate that refused the shape (negative) is never kept.
  CHECK(gemm_pick({1.0, -1.0, 0.5}, m) == 2);
  CHECK(gemm_pick({-1.0, 0.8, 0.7}, m) == 2);  // no first answer to hold to: the fastest
  CHECK(gemm_pick({-1.0, 0.8}, m) == 1);
  CHECK(gemm_pick({-1.0, -1.0}, m) == -1);
  CHECK(gemm_pick({}, m) == -1);
  CHECK(gemm_pick({0.0, 0.5}, m) == 0);  // a zero time ran: the fastest
}

TEST_CASE("gemm algorithm choice parses heuristic and timed and refuses the rest in one line") {
  CHECK(gemm_algo_choice_parse("heuristic", "--gemm-algo") == GemmAlgoChoice::heuristic);
  CHECK(gemm_algo_choice_parse("timed", "--gemm-algo") == GemmAlgoChoice::timed);
  for (const char* bad : {"", "Timed", "fast", "timed "}) {
    CAPTURE(bad);
    const std::string want =
        std::string("--gemm-algo must be heuristic or timed, got '") + bad + "'";
    CHECK_THROWS_WITH_AS(gemm_algo_choice_parse(bad, "--gemm-algo"), want.c_str(), Error);
  }
  CHECK(gemm_algo_choice() == GemmAlgoChoice::heuristic);  // the default
  gemm_set_algo_choice(GemmAlgoChoice::timed);
  CHECK(gemm_algo_choice() == GemmAlgoChoice::timed);
  gemm_set_algo_choice(GemmAlgoChoice::heuristic);
}
