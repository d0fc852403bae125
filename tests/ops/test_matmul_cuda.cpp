// GPU: matmul forward and backward (cuBLAS, fp32) on cuda:0 against the CPU
// dispatcher on the same inputs, gradients accumulating into non-zero buffers;
// dinp overwritten with beta 0 equal to dinp added onto zeros.

#include <doctest/doctest.h>

#include "ops/matmul.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/matmul_dinp_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct MatmulSizes {
  int64_t N, C, OC;
};
const MatmulSizes kMatmulSizes[] = {
    {1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {1, 64, 3}, {257, 384, 129}};
}  // namespace

TEST_CASE("matmul forward on cuda:0 matches the CPU") {
  CpuAndCuda s;
  for (auto [N, C, OC] : kMatmulSizes) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(OC);
    TensorPair x = f32_pair(s, random_vector(N * C, 1), {N, C});
    TensorPair w = f32_pair(s, random_vector(OC * C, 2), {OC, C});
    TensorPair out = f32_pair(s, random_vector(N * OC, 3), {N, OC});  // overwritten
    ops::matmul_forward(s.cpu, out.cpu, x.cpu, w.cpu, N, C, OC);
    ops::matmul_forward(s.gpu, out.gpu, x.gpu, w.gpu, N, C, OC);
    check_cuda_matches_cpu(s, out, 1e-4, 1e-5, "out");
  }
}

TEST_CASE("matmul backward on cuda:0 accumulates like the CPU, with and without dinp") {
  CpuAndCuda s;
  for (auto [N, C, OC] : kMatmulSizes) {
    for (bool with_dinp : {true, false}) {
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(OC);
      CAPTURE(with_dinp);
      TensorPair x = f32_pair(s, random_vector(N * C, 4), {N, C});
      TensorPair w = f32_pair(s, random_vector(OC * C, 5), {OC, C});
      TensorPair dy = f32_pair(s, random_vector(N * OC, 6), {N, OC});
      TensorPair dx = f32_pair(s, random_vector(N * C, 7), {N, C});
      TensorPair dw = f32_pair(s, random_vector(OC * C, 8), {OC, C});
      ops::matmul_backward(s.cpu, with_dinp ? dx.cpu : Tensor(), dw.cpu, dy.cpu, x.cpu, w.cpu, N, C,
                           OC);
      ops::matmul_backward(s.gpu, with_dinp ? dx.gpu : Tensor(), dw.gpu, dy.gpu, x.gpu, w.gpu, N, C,
                           OC);
      check_cuda_matches_cpu(s, dx, 1e-4, 1e-5, "dinp");
      check_cuda_matches_cpu(s, dw, 1e-4, 1e-5, "dweight");
    }
  }
}

TEST_CASE("matmul backward on cuda:0 overwriting dinp (beta 0) equals adding onto zeros") {
  Stream s(cuda_device(0), "cuda:0 compute");
  for (DType x : {DType::f32, DType::bf16}) check_dinp_overwrite(s, x);
}
