// GPU: RMSNorm forward (out, rstd) and backward (dinp and dweight accumulating
// into non-zero buffers) on cuda:0 against the CPU dispatcher, through both of
// backward's plans (ops/rmsnorm_plan.h).

#include <doctest/doctest.h>

#include "ops/rmsnorm.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct RmsnormSizes {
  int64_t N, C;
};
// Backward in one pass (C % 8 == 0, C <= 1024: 1 to 4 channel groups a lane, 264
// leaving most lanes one group short; 4100 rows: several blocks, the last part
// full) and in two (odd C, C > 1024).
const RmsnormSizes kRmsnormSizes[] = {{1, 1},      {1, 7},      {3, 5},       {5, 33},
                                      {2, 128},    {257, 1000}, {129, 264},   {4100, 768},
                                      {300, 1024}, {17, 1032},  {1000, 2048}, {4097, 3}};
}  // namespace

TEST_CASE("rmsnorm forward and backward on cuda:0 match the CPU") {
  CpuAndCuda s;
  const float eps = 1e-5f;
  for (auto [N, C] : kRmsnormSizes) {
    CAPTURE(N);
    CAPTURE(C);
    TensorPair x = f32_pair(s, random_vector(N * C, 1, -2, 2), {N, C});
    TensorPair w = f32_pair(s, random_vector(C, 2, 0.5, 1.5), {C});
    TensorPair out = f32_pair(s, random_vector(N * C, 3), {N, C});
    TensorPair rstd = f32_pair(s, random_vector(N, 4), {N});
    ops::rmsnorm_forward(s.cpu, out.cpu, rstd.cpu, x.cpu, w.cpu, N, C, eps);
    ops::rmsnorm_forward(s.gpu, out.gpu, rstd.gpu, x.gpu, w.gpu, N, C, eps);
    check_cuda_matches_cpu(s, out, 1e-5, 1e-6, "out");
    check_cuda_matches_cpu(s, rstd, 1e-5, 1e-6, "rstd");

    // Backward from the CPU's rstd on both, so only the backward differs.
    TensorPair r = f32_pair(s, f32_values(s.cpu, rstd.cpu), {N});
    TensorPair dy = f32_pair(s, random_vector(N * C, 5), {N, C});
    TensorPair dx = f32_pair(s, random_vector(N * C, 6), {N, C});
    TensorPair dw = f32_pair(s, random_vector(C, 7), {C});
    ops::rmsnorm_backward(s.cpu, dx.cpu, dw.cpu, dy.cpu, x.cpu, w.cpu, r.cpu, N, C);
    ops::rmsnorm_backward(s.gpu, dx.gpu, dw.gpu, dy.gpu, x.gpu, w.gpu, r.gpu, N, C);
    check_cuda_matches_cpu(s, dx, 1e-5, 1e-5, "dinp");
    check_cuda_matches_cpu(s, dw, 1e-5, 1e-5, "dweight");
  }
}
