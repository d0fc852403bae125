// GPU: attention in bf16 on cuda:0. The exact kernel against the CPU's bf16 kernel
// (fp32 math, one rounding per store on both); cuDNN's fused SDPA against the exact
// kernel (out, lse, dq, dk, dv) over GQA, T = 1, odd T and D = 64, 128; cuDNN's
// forward feeding the exact backward and the other way round; a shape cuDNN
// refuses falling back; the exact setting honoured; `cudnn` refused in f32.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/core/check.h"
#include "ops/attention.h"
#include "ops/cpu/attention.h"
#include "tests/ops/bf16_cuda_test_util.h"
#ifdef FANOUT_HAS_CUDNN
#include "ops/cuda/attention_cudnn.h"
#endif

using namespace fanout;
using namespace fanout::test;

namespace {

struct Shape5 {
  int64_t B, T, H, KV, D;
};

struct ImplScope {
  explicit ImplScope(ops::AttentionImpl impl) : previous(ops::attention_impl()) {
    ops::attention_set_impl(impl);
  }
  ~ImplScope() { ops::attention_set_impl(previous); }
  ImplScope(const ImplScope&) = delete;
  ImplScope& operator=(const ImplScope&) = delete;
  ops::AttentionImpl previous;
};

struct CpuFp32Dots {  // the CPU's fp32-math bf16 path: its results are one rounding away
  CpuFp32Dots() : previous(ops::cpu::set_attention_bf16_dot(false)) {}
  ~CpuFp32Dots() { ops::cpu::set_attention_bf16_dot(previous); }
  bool previous;
};

int64_t refusals() {
#ifdef FANOUT_HAS_CUDNN
  return ops::cuda::attention_cudnn_refusals();
#else
  return 0;
#endif
}

// Inputs of one problem on cuda:0 (bf16) and the results of one implementation.
struct Problem {
  Shape5 c;
  Tensor q, k, v, dout16, dout32;
};

Problem make_problem(Stream& gpu, Shape5 c, uint64_t seed) {
  const auto [B, T, H, KV, D] = c;
  std::vector<double> dout = bf16_rounded(random_vector(B * T * H * D, seed + 3));
  return {c,
          bf16_tensor(gpu, random_vector(B * T * H * D, seed, -2, 2), {B, T, H, D}),
          bf16_tensor(gpu, random_vector(B * T * KV * D, seed + 1, -2, 2), {B, T, KV, D}),
          bf16_tensor(gpu, random_vector(B * T * KV * D, seed + 2, -2, 2), {B, T, KV, D}),
          bf16_tensor(gpu, dout, {B, T, H, D}),
          f32_tensor(gpu, dout, {B, T, H, D})};
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<uint16_t> out_bits;
};

// Forward with `fwd`, then backward with `bwd` from that forward's out and lse.
Result run(Stream& gpu, const Problem& p, ops::AttentionImpl fwd, ops::AttentionImpl bwd,
           bool dout_bf16 = true) {
  const auto [B, T, H, KV, D] = p.c;
  Tensor out = Tensor::empty({B, T, H, D}, DType::bf16, gpu.device());
  Tensor lse = Tensor::empty({B, H, T}, DType::f32, gpu.device());
  Tensor dq = Tensor::empty({B, T, H, D}, DType::bf16, gpu.device());
  Tensor dk = Tensor::empty({B, T, KV, D}, DType::bf16, gpu.device());
  Tensor dv = Tensor::empty({B, T, KV, D}, DType::bf16, gpu.device());
  {
    ImplScope scope(fwd);
    ops::attention_forward(gpu, out, lse, p.q, p.k, p.v, B, T, T, H, KV, D);
  }
  {
    ImplScope scope(bwd);
    ops::attention_backward(gpu, dq, dk, dv, dout_bf16 ? p.dout16 : p.dout32, p.q, p.k, p.v, out,
                            lse, B, T, H, KV, D);
  }
  return {bf16_values(gpu, out), f32_values(gpu, lse), bf16_values(gpu, dq),
          bf16_values(gpu, dk),  bf16_values(gpu, dv), bf16_bits(gpu, out)};
}

// cuDNN rounds P and dS to bf16 before its matmuls; the exact kernel keeps them in
// fp32. Both see the same bf16 inputs; lse differs only by fp32 summation order.
void check_cudnn_close(const Result& got, const Result& ref, int64_t T, const char* what) {
  CAPTURE(what);
  check_close_scaled(got.out, ref.out, 1.0 / 64, 1.0 / 64, "out");
  check_close_scaled(got.lse, ref.lse, 1e-3, 1e-3, "lse");
  if (T > 1) {
    check_close_scaled(got.dq, ref.dq, 1.0 / 32, 1.0 / 32, "dq");
    check_close_scaled(got.dk, ref.dk, 1.0 / 32, 1.0 / 32, "dk");
  }
  check_close_scaled(got.dv, ref.dv, 1.0 / 32, 1.0 / 32, "dv");
}

const Shape5 kCudnnCases[] = {
    {2, 1, 12, 3, 64}, {2, 17, 12, 3, 64},  {2, 129, 12, 3, 128},
    {1, 64, 4, 4, 64}, {2, 128, 8, 1, 128}, {1, 300, 12, 3, 64},
};

}  // namespace

TEST_CASE("bf16 exact attention on cuda:0 matches the CPU's bf16 kernel, every dout dtype") {
  CpuAndCuda s;
  CpuFp32Dots fp32_dots;
  ImplScope exact(ops::AttentionImpl::exact);
  const Shape5 cases[] = {{1, 1, 2, 1, 16},
                          {2, 17, 4, 2, 32},
                          {2, 45, 12, 3, 64},
                          {1, 70, 4, 1, 128},
                          {1, 33, 2, 2, 200}};
  for (auto [B, T, H, KV, D] : cases) {
    CAPTURE(T);
    CAPTURE(D);
    TensorPair q = bf16_pair(s, random_vector(B * T * H * D, 21, -2, 2), {B, T, H, D});
    TensorPair k = bf16_pair(s, random_vector(B * T * KV * D, 22, -2, 2), {B, T, KV, D});
    TensorPair v = bf16_pair(s, random_vector(B * T * KV * D, 23, -2, 2), {B, T, KV, D});
    TensorPair out = bf16_pair(s, random_vector(B * T * H * D, 24), {B, T, H, D});
    TensorPair lse = f32_pair(s, random_vector(B * H * T, 25), {B, H, T});
    ops::attention_forward(s.cpu, out.cpu, lse.cpu, q.cpu, k.cpu, v.cpu, B, T, T, H, KV, D);
    ops::attention_forward(s.gpu, out.gpu, lse.gpu, q.gpu, k.gpu, v.gpu, B, T, T, H, KV, D);
    // One rounding of values that agree to fp32 precision: at most one bf16 step apart
    // (the H100 showed such neighbours in out, dq, dk and dv).
    check_close_scaled(bf16_values(s.gpu, out.gpu), bf16_values(s.cpu, out.cpu), kBf16Step, 1e-4,
                       "out");
    check_cuda_matches_cpu(s, lse, 1e-5, 1e-5, "lse");
    // The backward from the CPU's out and lse on both sides.
    TensorPair out_c = bf16_pair(s, bf16_values(s.cpu, out.cpu), {B, T, H, D});
    TensorPair lse_c = f32_pair(s, f32_values(s.cpu, lse.cpu), {B, H, T});
    const std::vector<double> dout_values = bf16_rounded(random_vector(B * T * H * D, 26));
    for (DType G : {DType::bf16, DType::f32}) {
      CAPTURE(dtype_name(G));
      TensorPair dout{float_tensor(s.cpu, G, dout_values, {B, T, H, D}),
                      float_tensor(s.gpu, G, dout_values, {B, T, H, D})};
      TensorPair dq = bf16_pair(s, random_vector(B * T * H * D, 27), {B, T, H, D});
      TensorPair dk = bf16_pair(s, random_vector(B * T * KV * D, 28), {B, T, KV, D});
      TensorPair dv = bf16_pair(s, random_vector(B * T * KV * D, 29), {B, T, KV, D});
      ops::attention_backward(s.cpu, dq.cpu, dk.cpu, dv.cpu, dout.cpu, q.cpu, k.cpu, v.cpu,
                              out_c.cpu, lse_c.cpu, B, T, H, KV, D);
      ops::attention_backward(s.gpu, dq.gpu, dk.gpu, dv.gpu, dout.gpu, q.gpu, k.gpu, v.gpu,
                              out_c.gpu, lse_c.gpu, B, T, H, KV, D);
      if (T > 1) {
        check_close_scaled(bf16_values(s.gpu, dq.gpu), bf16_values(s.cpu, dq.cpu), kBf16Step, 1e-4,
                           "dq");
        check_close_scaled(bf16_values(s.gpu, dk.gpu), bf16_values(s.cpu, dk.cpu), kBf16Step, 1e-4,
                           "dk");
      }
      check_close_scaled(bf16_values(s.gpu, dv.gpu), bf16_values(s.cpu, dv.cpu), kBf16Step, 1e-4,
                         "dv");
    }
  }
}

#ifdef FANOUT_HAS_CUDNN

TEST_CASE("cuDNN fused attention matches the exact kernel in bf16, GQA and odd T included") {
  Stream gpu{cuda_device(0), "cuda:0 compute"};
  using I = ops::AttentionImpl;
  REQUIRE(ops::cuda::attention_cudnn_loads());
  {
    ImplScope scope(I::automatic);
    CHECK(ops::attention_describe(cuda_device(0), DType::bf16).rfind("cuDNN fused SDPA", 0) == 0);
  }
  for (const Shape5& c : kCudnnCases) {
    CAPTURE(c.B);
    CAPTURE(c.T);
    CAPTURE(c.H);
    CAPTURE(c.KV);
    CAPTURE(c.D);
    const Problem p = make_problem(gpu, c, 100 + c.T);
    const Result exact = run(gpu, p, I::exact, I::exact);
    const int64_t before = refusals();
    const Result cudnn = run(gpu, p, I::cudnn, I::cudnn);
    // Every case but T = 1's backward (Note [cuDNN SDPA support]) runs in cuDNN.
    CHECK(refusals() - before <= (c.T == 1 ? 1 : 0));
    check_cudnn_close(cudnn, exact, c.T, "cudnn forward and backward");
    // cuDNN's out differs from the exact one somewhere: it really ran.
    if (c.T > 16) CHECK(cudnn.out_bits != exact.out_bits);
    // The model's f32 dout goes through a bf16 copy: the same values, the same result
    // (up to the order of cuDNN's atomic dq sums).
    const Result f32_dout = run(gpu, p, I::cudnn, I::cudnn, false);
    if (c.T > 1) {  // T = 1: dq and dk are zeros (a softmax over one key)
      check_close_scaled(f32_dout.dq, cudnn.dq, kBf16Rtol, 1e-3, "dq, f32 dout");
      check_close_scaled(f32_dout.dk, cudnn.dk, kBf16Rtol, 1e-3, "dk, f32 dout");
    }
    check_close_scaled(f32_dout.dv, cudnn.dv, kBf16Rtol, 1e-3, "dv, f32 dout");
  }
}

TEST_CASE("cuDNN's lse is the exact kernel's: either forward feeds either backward") {
  Stream gpu{cuda_device(0), "cuda:0 compute"};
  using I = ops::AttentionImpl;
  for (const Shape5& c : {Shape5{2, 129, 12, 3, 64}, Shape5{1, 64, 4, 4, 128}}) {
    CAPTURE(c.T);
    const Problem p = make_problem(gpu, c, 300);
    const Result exact = run(gpu, p, I::exact, I::exact);
    check_cudnn_close(run(gpu, p, I::cudnn, I::exact), exact, c.T, "cudnn forward, exact backward");
    check_cudnn_close(run(gpu, p, I::exact, I::cudnn), exact, c.T, "exact forward, cudnn backward");
  }
}

TEST_CASE("a shape cuDNN refuses falls back to the exact kernel with one line") {
  Stream gpu{cuda_device(0), "cuda:0 compute"};
  using I = ops::AttentionImpl;
  const Shape5 c{1, 33, 4, 2, 12};  // D = 12: not a multiple of 8
  const Problem p = make_problem(gpu, c, 400);
  const Result exact = run(gpu, p, I::exact, I::exact);
  const int64_t before = refusals();
  const Result fallback = run(gpu, p, I::cudnn, I::cudnn);
  CHECK(refusals() == before + 2);  // forward and backward, reported once each
  CHECK(fallback.out_bits == exact.out_bits);
  CHECK(fallback.lse == exact.lse);
  CHECK(fallback.dq == exact.dq);
  CHECK(fallback.dk == exact.dk);
  CHECK(fallback.dv == exact.dv);
  run(gpu, p, I::cudnn, I::cudnn);
  CHECK(refusals() == before + 2);  // not reported again
  ImplScope scope(I::cudnn);
  CHECK(ops::attention_describe(cuda_device(0), DType::bf16).find("refused") != std::string::npos);
}

TEST_CASE("attention_set_impl(exact) keeps bf16 on the exact kernel") {
  Stream gpu{cuda_device(0), "cuda:0 compute"};
  using I = ops::AttentionImpl;
  const Problem p = make_problem(gpu, {2, 64, 12, 3, 64}, 500);
  const Result a = run(gpu, p, I::exact, I::exact);
  const int64_t before = refusals();
  const Result b = run(gpu, p, I::exact, I::exact);
  CHECK(refusals() == before);
  // The exact kernel is deterministic: the same bits again, unlike cuDNN's.
  CHECK(a.out_bits == b.out_bits);
  CHECK(a.dq == b.dq);
  CHECK(a.dk == b.dk);
  CHECK(a.dv == b.dv);
  CHECK(run(gpu, p, I::automatic, I::automatic).out_bits != a.out_bits);  // automatic: cuDNN
}

#endif  // FANOUT_HAS_CUDNN

TEST_CASE("--attention cudnn with f32 storage is a usage error on cuda:0") {
  CpuAndCuda s;
  ImplScope scope(ops::AttentionImpl::cudnn);
  const int64_t B = 1, T = 8, H = 2, KV = 1, D = 16;
  TensorPair q = f32_pair(s, random_vector(B * T * H * D, 1), {B, T, H, D});
  TensorPair k = f32_pair(s, random_vector(B * T * KV * D, 2), {B, T, KV, D});
  TensorPair v = f32_pair(s, random_vector(B * T * KV * D, 3), {B, T, KV, D});
  TensorPair out = f32_pair(s, random_vector(B * T * H * D, 4), {B, T, H, D});
  TensorPair lse = f32_pair(s, random_vector(B * H * T, 5), {B, H, T});
  CHECK_THROWS_WITH_AS(
      ops::attention_forward(s.gpu, out.gpu, lse.gpu, q.gpu, k.gpu, v.gpu, B, T, T, H, KV, D),
      doctest::Contains("--attention cudnn needs --precision bf16"), Error);
}
