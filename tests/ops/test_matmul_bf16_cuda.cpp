// GPU: every bf16 matmul on cuda:0 (cuBLASLt, or cublasGemmEx where Lt has no
// algorithm) against the CPU bf16 twin on the same inputs: forward into f32 and
// bf16, backward accumulating onto non-zero gradients, weight-gradient rows from
// row0 > 0, the residual folded into the forward, padded rows (ld_out, ld_dout),
// operands at odd element offsets (alignment classes 2 and 4), and the cached
// plan giving the same bits twice; the same under timed algorithms. Tolerances:
// Note [bf16 GEMM tolerance on cuda:0].

#include <doctest/doctest.h>

#include <utility>

#include "ops/gemm_plan.h"
#include "ops/matmul.h"
#include "tests/ops/matmul_cuda_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct Sizes {
  int64_t N, C, OC;
};
// 1, odd sizes (C or OC odd: rows off 16-byte alignment), aligned, and one large.
const Sizes kSizes[] = {{1, 1, 1},     {7, 33, 17},   {3, 7, 259},      {33, 259, 7},
                        {16, 64, 128}, {65, 128, 33}, {1024, 768, 3072}};

// out = x w^T into junk of out_dtype, on both devices.
void check_forward(CpuAndCuda& s, const Sizes& z, DType out_dtype) {
  const auto [N, C, OC] = z;
  CAPTURE(N);
  CAPTURE(C);
  CAPTURE(OC);
  CAPTURE(dtype_name(out_dtype));
  TensorPair x = float_pair(s, DType::bf16, random_vector(N * C, 1), {N, C});
  TensorPair w = float_pair(s, DType::bf16, random_vector(OC * C, 2), {OC, C});
  TensorPair out = float_pair(s, out_dtype, random_vector(N * OC, 3), {N, OC});  // junk
  ops::matmul_forward(s.cpu, out.cpu, x.cpu, w.cpu, N, C, OC);
  ops::matmul_forward(s.gpu, out.gpu, x.gpu, w.gpu, N, C, OC);
  check_float_close(s, out, gemm_rtol(out_dtype), gemm_atol(C), "out");
}

// dinp (if with_dinp) and dweight accumulated onto non-zero priors, on both devices.
void check_backward(CpuAndCuda& s, const Sizes& z, bool with_dinp) {
  const auto [N, C, OC] = z;
  CAPTURE(N);
  CAPTURE(C);
  CAPTURE(OC);
  CAPTURE(with_dinp);
  TensorPair x = float_pair(s, DType::bf16, random_vector(N * C, 4), {N, C});
  TensorPair w = float_pair(s, DType::bf16, random_vector(OC * C, 5), {OC, C});
  TensorPair dy = float_pair(s, DType::bf16, random_vector(N * OC, 6), {N, OC});
  TensorPair dx = f32_pair(s, random_vector(N * C, 7), {N, C});  // priors: += keeps them
  TensorPair dw = f32_pair(s, random_vector(OC * C, 8), {OC, C});
  ops::matmul_backward(s.cpu, with_dinp ? dx.cpu : Tensor(), dw.cpu, dy.cpu, x.cpu, w.cpu, N, C,
                       OC);
  ops::matmul_backward(s.gpu, with_dinp ? dx.gpu : Tensor(), dw.gpu, dy.gpu, x.gpu, w.gpu, N, C,
                       OC);
  check_float_close(s, dx, kGemmRtol, gemm_atol(OC), "dinp");
  check_float_close(s, dw, kGemmRtol, gemm_atol(N), "dweight");
}
}  // namespace

TEST_CASE("matmul bf16 forward on cuda:0 matches the CPU, into f32 and bf16") {
  CpuAndCuda s;
  for (const Sizes& z : kSizes) {
    for (DType out_dtype : {DType::f32, DType::bf16}) check_forward(s, z, out_dtype);
  }
}

TEST_CASE("matmul bf16 backward on cuda:0 accumulates like the CPU, with and without dinp") {
  CpuAndCuda s;
  for (const Sizes& z : kSizes) {
    for (bool with_dinp : {true, false}) check_backward(s, z, with_dinp);
  }
}

TEST_CASE("matmul bf16 weight gradient rows on cuda:0 match the CPU, from odd row0 too") {
  CpuAndCuda s;
  const int64_t N = 37, C = 33, OC = 259;
  TensorPair x = float_pair(s, DType::bf16, random_vector(N * C, 9), {N, C});
  TensorPair dy = float_pair(s, DType::bf16, random_vector(N * OC, 10), {N, OC});
  // Odd row0: dout's block starts 2-byte aligned.
  for (auto [row0, rows] :
       {std::pair<int64_t, int64_t>{0, OC}, {1, 64}, {100, 159}, {64, 128}, {OC - 1, 1}}) {
    CAPTURE(row0);
    CAPTURE(rows);
    TensorPair dw = f32_pair(s, random_vector(rows * C, 11), {rows, C});
    ops::matmul_backward_weight_rows(s.cpu, dw.cpu, dy.cpu, x.cpu, N, C, OC, row0, rows);
    ops::matmul_backward_weight_rows(s.gpu, dw.gpu, dy.gpu, x.gpu, N, C, OC, row0, rows);
    check_float_close(s, dw, kGemmRtol, gemm_atol(N), "dweight_rows");
  }
}

TEST_CASE("matmul_forward_residual on cuda:0 matches the CPU, in place and not, bf16 and f32") {
  CpuAndCuda s;
  for (auto [N, C, OC] : kSizes) {
    for (DType in : {DType::bf16, DType::f32}) {
      for (bool in_place : {false, true}) {
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(OC);
        CAPTURE(dtype_name(in));
        CAPTURE(in_place);
        TensorPair x = float_pair(s, in, random_vector(N * C, 12), {N, C});
        TensorPair w = float_pair(s, in, random_vector(OC * C, 13), {OC, C});
        TensorPair res = f32_pair(s, random_vector(N * OC, 14, -4.0, 4.0), {N, OC});
        TensorPair out = in_place ? res : f32_pair(s, random_vector(N * OC, 15), {N, OC});
        ops::matmul_forward_residual(s.cpu, out.cpu, res.cpu, x.cpu, w.cpu, N, C, OC);
        ops::matmul_forward_residual(s.gpu, out.gpu, res.gpu, x.gpu, w.gpu, N, C, OC);
        check_float_close(s, out, kGemmRtol, gemm_atol(C), "out");
        if (!in_place) check_cuda_equals_cpu(s, res, "residual unchanged");
      }
    }
  }
}

TEST_CASE("matmul with padded rows on cuda:0 matches the CPU and leaves the padding") {
  CpuAndCuda s;
  for (auto [N, C, OC] : {Sizes{1, 1, 1}, Sizes{7, 33, 17}, Sizes{33, 64, 259}, Sizes{5, 7, 64},
                          Sizes{256, 768, 3001}}) {
    for (auto [in, out_dtype] : {std::pair{DType::bf16, DType::f32},
                                 {DType::bf16, DType::bf16},
                                 {DType::f32, DType::f32}}) {
      const int64_t ld = ops::vocab_padded(OC), extent = N * ld;
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(OC);
      CAPTURE(dtype_name(in));
      CAPTURE(dtype_name(out_dtype));
      TensorPair x = float_pair(s, in, random_vector(N * C, 16), {N, C});
      TensorPair w = float_pair(s, in, random_vector(OC * C, 17), {OC, C});
      // Forward: junk in the valid columns, the sentinel between.
      TensorPair out =
          float_pair(s, out_dtype, padded_rows(random_vector(N * OC, 18), N, OC, ld), {extent});
      ops::matmul_forward(s.cpu, out.cpu, x.cpu, w.cpu, N, C, OC, ld);
      ops::matmul_forward(s.gpu, out.gpu, x.gpu, w.gpu, N, C, OC, ld);
      check_float_close(s, out, gemm_rtol(out_dtype), gemm_atol(C), "padded out");
      CHECK(padding_intact(float_values(s.gpu, out.gpu), OC, ld));
      // Backward from a padded dout: a sentinel read as data would be far off.
      TensorPair dy =
          float_pair(s, in, padded_rows(random_vector(N * OC, 19), N, OC, ld), {extent});
      TensorPair dx = f32_pair(s, random_vector(N * C, 20), {N, C});
      TensorPair dw = f32_pair(s, random_vector(OC * C, 21), {OC, C});
      ops::matmul_backward(s.cpu, dx.cpu, dw.cpu, dy.cpu, x.cpu, w.cpu, N, C, OC, ld);
      ops::matmul_backward(s.gpu, dx.gpu, dw.gpu, dy.gpu, x.gpu, w.gpu, N, C, OC, ld);
      check_float_close(s, dx, kGemmRtol, gemm_atol(OC), "dinp from padded dout");
      check_float_close(s, dw, kGemmRtol, gemm_atol(N), "dweight from padded dout");
      const int64_t row0 = OC / 3, rows = OC - OC / 3;
      if (rows == 0) continue;
      TensorPair part = f32_pair(s, random_vector(rows * C, 22), {rows, C});
      ops::matmul_backward_weight_rows(s.cpu, part.cpu, dy.cpu, x.cpu, N, C, OC, row0, rows, ld);
      ops::matmul_backward_weight_rows(s.gpu, part.gpu, dy.gpu, x.gpu, N, C, OC, row0, rows, ld);
      check_float_close(s, part, kGemmRtol, gemm_atol(N), "dweight rows from padded dout");
    }
  }
}

// Operands one element into their allocation: bf16 2-byte aligned, f32 4-byte. The
// heuristic may have no algorithm for these (then cublasGemmEx runs, with one
// stderr line per shape); either way the results must hold.
TEST_CASE("matmul bf16 on cuda:0 with operands at odd element offsets matches the CPU") {
  CpuAndCuda s;
  for (auto [N, C, OC] : {Sizes{7, 33, 17}, Sizes{16, 64, 128}, Sizes{64, 256, 512}}) {
    for (DType out_dtype : {DType::f32, DType::bf16}) {
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(OC);
      CAPTURE(dtype_name(out_dtype));
      TensorPair x = float_pair(s, DType::bf16, random_vector(N * C, 23), {N, C}, 1);
      TensorPair w = float_pair(s, DType::bf16, random_vector(OC * C, 24), {OC, C}, 1);
      TensorPair out = float_pair(s, out_dtype, random_vector(N * OC, 25), {N, OC}, 1);
      ops::matmul_forward(s.cpu, out.cpu, x.cpu, w.cpu, N, C, OC);
      ops::matmul_forward(s.gpu, out.gpu, x.gpu, w.gpu, N, C, OC);
      check_float_close(s, out, gemm_rtol(out_dtype), gemm_atol(C), "out");
      TensorPair dy = float_pair(s, DType::bf16, random_vector(N * OC, 26), {N, OC}, 1);
      TensorPair dx = float_pair(s, DType::f32, random_vector(N * C, 27), {N, C}, 1);
      TensorPair dw = float_pair(s, DType::f32, random_vector(OC * C, 28), {OC, C}, 1);
      ops::matmul_backward(s.cpu, dx.cpu, dw.cpu, dy.cpu, x.cpu, w.cpu, N, C, OC);
      ops::matmul_backward(s.gpu, dx.gpu, dw.gpu, dy.gpu, x.gpu, w.gpu, N, C, OC);
      check_float_close(s, dx, kGemmRtol, gemm_atol(OC), "dinp");
      check_float_close(s, dw, kGemmRtol, gemm_atol(N), "dweight");
      TensorPair res = float_pair(s, DType::f32, random_vector(N * OC, 29), {N, OC}, 1);
      TensorPair out2 = float_pair(s, DType::f32, random_vector(N * OC, 30), {N, OC}, 3);
      ops::matmul_forward_residual(s.cpu, out2.cpu, res.cpu, x.cpu, w.cpu, N, C, OC);
      ops::matmul_forward_residual(s.gpu, out2.gpu, res.gpu, x.gpu, w.gpu, N, C, OC);
      check_float_close(s, out2, kGemmRtol, gemm_atol(C), "out + residual");
    }
  }
}

TEST_CASE("matmul bf16 on cuda:0 gives the same bits twice through its cached plan") {
  CpuAndCuda s;
  const int64_t N = 128, C = 256, OC = 384;
  TensorPair x = float_pair(s, DType::bf16, random_vector(N * C, 31), {N, C});
  TensorPair w = float_pair(s, DType::bf16, random_vector(OC * C, 32), {OC, C});
  Tensor a = f32_tensor(s.gpu, std::vector<double>(N * OC, 0.0), {N, OC});
  Tensor b = f32_tensor(s.gpu, std::vector<double>(N * OC, 1.0), {N, OC});
  ops::matmul_forward(s.gpu, a, x.gpu, w.gpu, N, C, OC);
  ops::matmul_forward(s.gpu, b, x.gpu, w.gpu, N, C, OC);
  std::vector<float> first = tensor_to_vector<float>(s.gpu, a);
  CHECK(max_abs(cast_vector<double>(first)) > 0);
  CHECK(tensor_to_vector<float>(s.gpu, b) == first);
}

TEST_CASE("matmul bf16 on cuda:0 with timed algorithms matches the CPU and keeps what it adds to") {
  // Note [Timed GEMM algorithms]: the first call of each shape times its candidates
  // on the call's own operands; with beta 0 into D, else into a scratch, so the
  // priors of the accumulating GEMMs and the residual must come through intact.
  struct Restore {
    ~Restore() { ops::gemm_set_algo_choice(ops::GemmAlgoChoice::heuristic); }
  } restore;
  ops::gemm_set_algo_choice(ops::GemmAlgoChoice::timed);
  CpuAndCuda s;
  // Shapes no other case here uses, so that these calls are their first.
  for (const Sizes& z : {Sizes{512, 384, 1152}, Sizes{300, 200, 520}}) {
    check_forward(s, z, DType::bf16);
    check_backward(s, z, true);

    const auto [N, C, OC] = z;
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(OC);
    TensorPair x = float_pair(s, DType::bf16, random_vector(N * C, 41), {N, C});
    TensorPair w = float_pair(s, DType::bf16, random_vector(OC * C, 42), {OC, C});
    TensorPair res = f32_pair(s, random_vector(N * OC, 47, -4.0, 4.0), {N, OC});
    TensorPair sum = f32_pair(s, random_vector(N * OC, 48), {N, OC});
    ops::matmul_forward_residual(s.cpu, sum.cpu, res.cpu, x.cpu, w.cpu, N, C, OC);
    ops::matmul_forward_residual(s.gpu, sum.gpu, res.gpu, x.gpu, w.gpu, N, C, OC);
    check_float_close(s, sum, kGemmRtol, gemm_atol(C), "out + residual");
    check_cuda_equals_cpu(s, res, "residual unchanged");

    // Timed once: later calls run the kept algorithm, the same bits each time.
    Tensor a = f32_tensor(s.gpu, std::vector<double>(N * OC, 0.0), {N, OC});
    Tensor b = f32_tensor(s.gpu, std::vector<double>(N * OC, 1.0), {N, OC});
    ops::matmul_forward(s.gpu, a, x.gpu, w.gpu, N, C, OC);
    ops::matmul_forward(s.gpu, b, x.gpu, w.gpu, N, C, OC);
    CHECK(tensor_to_vector<float>(s.gpu, b) == tensor_to_vector<float>(s.gpu, a));
  }
}
