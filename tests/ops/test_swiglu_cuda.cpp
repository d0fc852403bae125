// GPU: SwiGLU forward and backward on cuda:0 against the CPU dispatcher, with
// gates far into both tails of the sigmoid, and gradients written in place; and
// over the fused gate/up rows against the flat op.

#include <doctest/doctest.h>

#include "ops/swiglu.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/strided_ops_test_util.h"

using namespace fanout;
using namespace fanout::test;

TEST_CASE("swiglu forward and backward on cuda:0 match the CPU, in place too") {
  CpuAndCuda s;
  for (int64_t n : {1, 255, 257, 100003}) {
    for (bool in_place : {false, true}) {
      CAPTURE(n);
      CAPTURE(in_place);
      TensorPair gate = f32_pair(s, random_vector(n, 1, -30, 30), {n});
      TensorPair up = f32_pair(s, random_vector(n, 2, -2, 2), {n});
      TensorPair out = f32_pair(s, random_vector(n, 3), {n});
      ops::swiglu_forward(s.cpu, out.cpu, gate.cpu, up.cpu, n);
      ops::swiglu_forward(s.gpu, out.gpu, gate.gpu, up.gpu, n);
      check_cuda_matches_cpu(s, out, 1e-5, 1e-6, "out");

      TensorPair dout = f32_pair(s, random_vector(n, 4), {n});
      TensorPair dgate = in_place ? gate : f32_pair(s, random_vector(n, 5), {n});
      TensorPair dup = in_place ? up : f32_pair(s, random_vector(n, 6), {n});
      ops::swiglu_backward(s.cpu, dgate.cpu, dup.cpu, dout.cpu, gate.cpu, up.cpu, n);
      ops::swiglu_backward(s.gpu, dgate.gpu, dup.gpu, dout.gpu, gate.gpu, up.gpu, n);
      check_cuda_matches_cpu(s, dgate, 1e-5, 1e-6, "dgate");
      check_cuda_matches_cpu(s, dup, 1e-5, 1e-6, "dup");
    }
  }
}

TEST_CASE("swiglu over rows on cuda:0 equals the flat op, vectorised and not") {
  Stream s(cuda_device(0), "cuda:0 compute");
  for (DType x : {DType::f32, DType::bf16})
    for (DType g : {DType::f32, DType::bf16}) {
      check_swiglu_rows(s, x, g, 64, 256, 512, 256);    // the fused layout, 8 a step
      check_swiglu_rows(s, x, g, 7, 33, 66, 33);        // odd columns: one at a time
      check_swiglu_rows(s, x, g, 5, 64, 131, 66);       // odd stride: one at a time
      check_swiglu_rows(s, x, g, 1, 1001, 2002, 1001);  // one row: the flat kernel
    }
}
