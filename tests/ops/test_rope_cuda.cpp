// GPU: RoPE forward and backward on cuda:0 against the CPU dispatcher, out of
// place and in place, with position offsets up to a long context; and over the
// fused q/k/v rows, with the v copy (tensor_copy_rows, cudaMemcpy2DAsync).

#include <doctest/doctest.h>

#include "ops/rope.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/strided_ops_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct RopeCase {
  int64_t B, T, H, D;
  double theta;
  int64_t pos_offset;
};
// Scalar and 16-byte steps (ops/rope_plan.h), one batch group and several (300
// rows of one head), heads of more pairs than one block's table (2064 dims).
const RopeCase kRopeCases[] = {{1, 1, 1, 2, 10000.0, 0},         {2, 3, 5, 6, 10000.0, 0},
                               {3, 17, 4, 64, 10000.0, 1000},    {1, 5, 3, 10, 500000.0, 7},
                               {2, 300, 8, 128, 500000.0, 4000}, {1, 1, 32, 128, 10000.0, 8191},
                               {300, 3, 1, 16, 10000.0, 2},      {1, 2, 2, 2064, 10000.0, 9}};
}  // namespace

TEST_CASE("rope forward and backward on cuda:0 match the CPU, in place too") {
  CpuAndCuda s;
  for (auto [B, T, H, D, theta, pos] : kRopeCases) {
    for (bool in_place : {false, true}) {
      CAPTURE(B);
      CAPTURE(T);
      CAPTURE(H);
      CAPTURE(D);
      CAPTURE(pos);
      CAPTURE(in_place);
      const int64_t n = B * T * H * D;
      TensorPair x = f32_pair(s, random_vector(n, 1), {B, T, H, D});
      TensorPair y = in_place ? x : f32_pair(s, random_vector(n, 2), {B, T, H, D});
      ops::rope_forward(s.cpu, y.cpu, x.cpu, B, T, H, D, theta, pos);
      ops::rope_forward(s.gpu, y.gpu, x.gpu, B, T, H, D, theta, pos);
      check_cuda_matches_cpu(s, y, 1e-5, 1e-6, "out");

      TensorPair dy = f32_pair(s, random_vector(n, 3), {B, T, H, D});
      TensorPair dx = in_place ? dy : f32_pair(s, random_vector(n, 4), {B, T, H, D});
      ops::rope_backward(s.cpu, dx.cpu, dy.cpu, B, T, H, D, theta, pos);
      ops::rope_backward(s.gpu, dx.gpu, dy.gpu, B, T, H, D, theta, pos);
      check_cuda_matches_cpu(s, dx, 1e-5, 1e-6, "dinp");
    }
  }
}

TEST_CASE("rope with llama3 and linear scaling on cuda:0 matches the CPU") {
  CpuAndCuda s;
  const ops::RopeFreq scaled[] = {
      {500000.0, {ops::RopeScalingType::llama3, 8.0, 1.0, 4.0, 8192}},
      {10000.0, {ops::RopeScalingType::llama3, 32.0, 1.0, 4.0, 64}},
      {10000.0, {ops::RopeScalingType::linear, 4.0}},
  };
  const int64_t B = 2, T = 37, H = 3, D = 64, pos = 5000;
  const int64_t n = B * T * H * D;
  for (const ops::RopeFreq& f : scaled) {
    CAPTURE(f.scaling.factor);
    TensorPair x = f32_pair(s, random_vector(n, 11), {B, T, H, D});
    TensorPair y = f32_pair(s, random_vector(n, 12), {B, T, H, D});
    ops::rope_forward(s.cpu, y.cpu, x.cpu, B, T, H, D, f, pos);
    ops::rope_forward(s.gpu, y.gpu, x.gpu, B, T, H, D, f, pos);
    check_cuda_matches_cpu(s, y, 1e-5, 1e-6, "out");
    ops::rope_backward(s.cpu, x.cpu, y.cpu, B, T, H, D, f, pos);
    ops::rope_backward(s.gpu, x.gpu, y.gpu, B, T, H, D, f, pos);
    check_cuda_matches_cpu(s, x, 1e-5, 1e-6, "dinp");
  }
}

TEST_CASE("rope over the fused q/k/v rows and the v copy on cuda:0 equal the contiguous ops") {
  Stream s(cuda_device(0), "cuda:0 compute");
  for (DType x : {DType::f32, DType::bf16}) {
    check_rope_rows(s, x, 2, 5, 3, 1, 8);
    check_rope_rows(s, x, 1, 33, 4, 2, 64);
    check_copy_rows(s, x, 33, 256, 64);
  }
}
