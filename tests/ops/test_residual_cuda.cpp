// GPU: residual add and its backward on cuda:0 equal the CPU dispatcher bit for
// bit (one rounding per element), in place and with da == db.

#include <doctest/doctest.h>

#include "ops/residual.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

TEST_CASE("residual forward and backward on cuda:0 equal the CPU, in place too") {
  CpuAndCuda s;
  for (int64_t n : {1, 255, 257, 1000003}) {
    for (bool alias : {false, true}) {
      CAPTURE(n);
      CAPTURE(alias);
      TensorPair a = f32_pair(s, random_vector(n, 1), {n});
      TensorPair b = f32_pair(s, random_vector(n, 2), {n});
      TensorPair out = alias ? a : f32_pair(s, random_vector(n, 3), {n});  // out == a
      ops::residual_forward(s.cpu, out.cpu, a.cpu, b.cpu, n);
      ops::residual_forward(s.gpu, out.gpu, a.gpu, b.gpu, n);
      check_cuda_equals_cpu(s, out, "out");

      TensorPair dout = f32_pair(s, random_vector(n, 4), {n});
      TensorPair da = f32_pair(s, random_vector(n, 5), {n});
      TensorPair db = alias ? da : f32_pair(s, random_vector(n, 6), {n});  // x + x: twice
      ops::residual_backward(s.cpu, da.cpu, db.cpu, dout.cpu, n);
      ops::residual_backward(s.gpu, da.gpu, db.gpu, dout.gpu, n);
      check_cuda_equals_cpu(s, da, "da");
      check_cuda_equals_cpu(s, db, "db");
    }
  }
}
