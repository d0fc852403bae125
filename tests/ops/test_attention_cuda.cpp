// GPU: causal GQA attention forward (out, lse; Tq <= Tk) and backward (dq, dk,
// dv) on cuda:0 against the CPU dispatcher, over the head dims of every lane
// layout of the kernel (D <= 32, 64, 128, 256, and D not a multiple of 32).

#include <doctest/doctest.h>

#include "ops/attention.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct AttentionCase {
  int64_t B, Tq, Tk, H, KV, D;
};
const AttentionCase kAttentionCases[] = {
    {1, 1, 1, 1, 1, 1},     {1, 5, 5, 2, 1, 8},    {2, 17, 17, 4, 2, 8},    {2, 7, 20, 6, 3, 16},
    {1, 1, 9, 4, 1, 64},    {1, 33, 33, 4, 4, 64}, {1, 20, 20, 3, 1, 40},   {2, 70, 70, 8, 2, 128},
    {1, 40, 40, 2, 1, 256}, {1, 9, 41, 2, 2, 200}, {2, 300, 300, 8, 4, 64},
};
}  // namespace

TEST_CASE("attention forward on cuda:0 matches the CPU, with fewer queries than keys too") {
  CpuAndCuda s;
  for (auto [B, Tq, Tk, H, KV, D] : kAttentionCases) {
    CAPTURE(B);
    CAPTURE(Tq);
    CAPTURE(Tk);
    CAPTURE(H);
    CAPTURE(KV);
    CAPTURE(D);
    TensorPair q = f32_pair(s, random_vector(B * Tq * H * D, 1, -2, 2), {B, Tq, H, D});
    TensorPair k = f32_pair(s, random_vector(B * Tk * KV * D, 2, -2, 2), {B, Tk, KV, D});
    TensorPair v = f32_pair(s, random_vector(B * Tk * KV * D, 3), {B, Tk, KV, D});
    TensorPair out = f32_pair(s, random_vector(B * Tq * H * D, 4), {B, Tq, H, D});
    TensorPair lse = f32_pair(s, random_vector(B * H * Tq, 5), {B, H, Tq});
    ops::attention_forward(s.cpu, out.cpu, lse.cpu, q.cpu, k.cpu, v.cpu, B, Tq, Tk, H, KV, D);
    ops::attention_forward(s.gpu, out.gpu, lse.gpu, q.gpu, k.gpu, v.gpu, B, Tq, Tk, H, KV, D);
    check_cuda_matches_cpu(s, out, 1e-4, 1e-5, "out");
    check_cuda_matches_cpu(s, lse, 1e-5, 1e-5, "lse");
  }
}

TEST_CASE("attention backward on cuda:0 matches the CPU") {
  CpuAndCuda s;
  for (auto [B, Tq, Tk, H, KV, D] : kAttentionCases) {
    if (Tq != Tk) continue;  // training backward: Tq == Tk
    const int64_t T = Tq;
    CAPTURE(B);
    CAPTURE(T);
    CAPTURE(H);
    CAPTURE(KV);
    CAPTURE(D);
    TensorPair q = f32_pair(s, random_vector(B * T * H * D, 6, -2, 2), {B, T, H, D});
    TensorPair k = f32_pair(s, random_vector(B * T * KV * D, 7, -2, 2), {B, T, KV, D});
    TensorPair v = f32_pair(s, random_vector(B * T * KV * D, 8), {B, T, KV, D});
    // out and lse from the CPU forward on both, so only the backward differs.
    Tensor out_c = Tensor::empty({B, T, H, D}, DType::f32, cpu_device(0));
    Tensor lse_c = Tensor::empty({B, H, T}, DType::f32, cpu_device(0));
    ops::attention_forward(s.cpu, out_c, lse_c, q.cpu, k.cpu, v.cpu, B, T, T, H, KV, D);
    TensorPair out = f32_pair(s, f32_values(s.cpu, out_c), {B, T, H, D});
    TensorPair lse = f32_pair(s, f32_values(s.cpu, lse_c), {B, H, T});
    TensorPair dout = f32_pair(s, random_vector(B * T * H * D, 9), {B, T, H, D});
    // Overwritten: start from garbage.
    TensorPair dq = f32_pair(s, random_vector(B * T * H * D, 10), {B, T, H, D});
    TensorPair dk = f32_pair(s, random_vector(B * T * KV * D, 11), {B, T, KV, D});
    TensorPair dv = f32_pair(s, random_vector(B * T * KV * D, 12), {B, T, KV, D});
    ops::attention_backward(s.cpu, dq.cpu, dk.cpu, dv.cpu, dout.cpu, q.cpu, k.cpu, v.cpu, out.cpu,
                            lse.cpu, B, T, H, KV, D);
    ops::attention_backward(s.gpu, dq.gpu, dk.gpu, dv.gpu, dout.gpu, q.gpu, k.gpu, v.gpu, out.gpu,
                            lse.gpu, B, T, H, KV, D);
    // With one key, p = 1 and dq = dk = 0 exactly: nothing non-zero to compare.
    check_cuda_matches_cpu(s, dq, 1e-4, 3e-5, "dq", T > 1);
    check_cuda_matches_cpu(s, dk, 1e-4, 3e-5, "dk", T > 1);
    check_cuda_matches_cpu(s, dv, 1e-4, 3e-5, "dv");
  }
}

TEST_CASE("attention forward then backward on cuda:0 alone matches the CPU chain") {
  // The GPU's own out and lse feed its backward, as in training.
  CpuAndCuda s;
  const int64_t B = 2, T = 45, H = 4, KV = 2, D = 32;
  TensorPair q = f32_pair(s, random_vector(B * T * H * D, 13, -2, 2), {B, T, H, D});
  TensorPair k = f32_pair(s, random_vector(B * T * KV * D, 14, -2, 2), {B, T, KV, D});
  TensorPair v = f32_pair(s, random_vector(B * T * KV * D, 15), {B, T, KV, D});
  TensorPair out = f32_pair(s, std::vector<double>(B * T * H * D), {B, T, H, D});
  TensorPair lse = f32_pair(s, std::vector<double>(B * H * T), {B, H, T});
  ops::attention_forward(s.cpu, out.cpu, lse.cpu, q.cpu, k.cpu, v.cpu, B, T, T, H, KV, D);
  ops::attention_forward(s.gpu, out.gpu, lse.gpu, q.gpu, k.gpu, v.gpu, B, T, T, H, KV, D);
  TensorPair dout = f32_pair(s, random_vector(B * T * H * D, 16), {B, T, H, D});
  TensorPair dq = f32_pair(s, std::vector<double>(B * T * H * D), {B, T, H, D});
  TensorPair dk = f32_pair(s, std::vector<double>(B * T * KV * D), {B, T, KV, D});
  TensorPair dv = f32_pair(s, std::vector<double>(B * T * KV * D), {B, T, KV, D});
  ops::attention_backward(s.cpu, dq.cpu, dk.cpu, dv.cpu, dout.cpu, q.cpu, k.cpu, v.cpu, out.cpu,
                          lse.cpu, B, T, H, KV, D);
  ops::attention_backward(s.gpu, dq.gpu, dk.gpu, dv.gpu, dout.gpu, q.gpu, k.gpu, v.gpu, out.gpu,
                          lse.gpu, B, T, H, KV, D);
  check_cuda_matches_cpu(s, dq, 1e-4, 3e-5, "dq");
  check_cuda_matches_cpu(s, dk, 1e-4, 3e-5, "dk");
  check_cuda_matches_cpu(s, dv, 1e-4, 3e-5, "dv");
}
