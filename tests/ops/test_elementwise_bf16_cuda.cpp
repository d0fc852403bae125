// GPU: the bf16 contracts of the element-wise ops on cuda:0 against their CPU
// twins. Bit for bit where the op is one rounding of the same fp32 arithmetic in
// the same order (casts, embedding, residual, AdamW's working copy); within two
// bf16 roundings elsewhere (RMSNorm's statistics sum in another order, SwiGLU's
// exp is another implementation, RoPE's sines come from another libm). Sizes 1,
// odd ones that are no multiple of 8 (the scalar tails), views one element in
// (unaligned: the scalar path throughout) and one large size (the vector body).

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/adamw.h"
#include "ops/cast.h"
#include "ops/embedding.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

// Results rounded once on each device: the same bf16 or neighbours.
constexpr double kPairRtol = kBf16Step;

const int64_t kSizes[] = {1, 13, 1001, (1 << 20) + 3};
const int64_t kOffsets[] = {0, 1};  // elements into the allocation: 1 is unaligned

// The same values on cpu:0 and cuda:0 as `dtype` (bf16 rounded), each a view
// `offset` elements into its allocation.
TensorPair pair_of(CpuAndCuda& s, DType dtype, const std::vector<double>& values, int64_t offset) {
  std::vector<double> padded(static_cast<size_t>(offset), 0.0);
  padded.insert(padded.end(), values.begin(), values.end());
  const auto n = static_cast<int64_t>(values.size()), all = n + offset;
  return {float_tensor(s.cpu, dtype, padded, {all}).view(offset, {n}),
          float_tensor(s.gpu, dtype, padded, {all}).view(offset, {n})};
}

// Every element's bits, f32 or bf16.
std::vector<uint32_t> bits_of(Stream& stream, const Tensor& t) {
  std::vector<uint32_t> out;
  if (t.dtype() == DType::bf16) {
    for (uint16_t b : bf16_bits(stream, t)) out.push_back(b);
  } else {
    for (float f : tensor_to_vector<float>(stream, t)) out.push_back(std::bit_cast<uint32_t>(f));
  }
  return out;
}

void check_bits_equal(CpuAndCuda& s, const TensorPair& t, const char* what) {
  CAPTURE(what);
  CHECK(max_abs(float_values(s.cpu, t.cpu)) > 0);  // comparing zeros would prove nothing
  std::vector<uint32_t> ref = bits_of(s.cpu, t.cpu), got = bits_of(s.gpu, t.gpu);
  size_t bad = 0;
  while (bad < ref.size() && ref[bad] == got[bad]) ++bad;
  CAPTURE(bad);
  CHECK(bad == ref.size());
}

// rtol per the result's dtype: kPairRtol for bf16, f32_rtol for f32.
void check_close(CpuAndCuda& s, const TensorPair& t, double f32_rtol, double atol,
                 const char* what) {
  CAPTURE(what);
  std::vector<double> ref = float_values(s.cpu, t.cpu), got = float_values(s.gpu, t.gpu);
  CHECK(max_abs(ref) > 0);
  const double rtol = t.cpu.dtype() == DType::bf16 ? kPairRtol : f32_rtol;
  std::string why;
  CHECK_MESSAGE(all_close(got, ref, rtol, atol, &why), why);
}

const char* name(DType t) {
  return t == DType::bf16 ? "bf16" : "f32";
}

}  // namespace

TEST_CASE("bf16 casts on cuda:0 give the CPU's bits, ties, NaN and infinities included") {
  CpuAndCuda s;
  for (int64_t n : kSizes) {
    for (int64_t off : kOffsets) {
      CAPTURE(n);
      CAPTURE(off);
      std::vector<double> x = random_vector(n, 1, -3, 3);
      for (int64_t i = 0; i < n; i += 5) {  // exact ties between two bf16 values
        const float lo = bf16_to_float(float_to_bf16(static_cast<float>(x[i])));
        x[i] = static_cast<double>(lo) + std::ldexp(std::fabs(lo), -8);
      }
      if (n > 3) {
        x[1] = std::numeric_limits<double>::quiet_NaN();
        x[2] = std::numeric_limits<double>::infinity();
        x[3] = 3.5e38;  // rounds past the largest bf16: inf
      }
      TensorPair src = pair_of(s, DType::f32, x, off);
      TensorPair b16 = pair_of(s, DType::bf16, std::vector<double>(n, 0.0), off);
      ops::cast_f32_to_bf16(s.cpu, b16.cpu, src.cpu, n);
      ops::cast_f32_to_bf16(s.gpu, b16.gpu, src.gpu, n);
      check_bits_equal(s, b16, "f32 -> bf16");
      TensorPair f32 = pair_of(s, DType::f32, std::vector<double>(n, 0.0), off);
      ops::cast_bf16_to_f32(s.cpu, f32.cpu, b16.cpu, n);
      ops::cast_bf16_to_f32(s.gpu, f32.gpu, b16.gpu, n);
      check_bits_equal(s, f32, "bf16 -> f32");
    }
  }
}

TEST_CASE("embedding forward on cuda:0 reads an f32 or bf16 table exactly as the CPU") {
  CpuAndCuda s;
  const int64_t V = 37;
  struct Shape2 {
    int64_t N, C;
  };
  for (Shape2 sh : {Shape2{1, 1}, Shape2{5, 13}, Shape2{9, 64}, Shape2{1000, 1032}}) {
    for (DType table_t : {DType::f32, DType::bf16}) {
      for (int64_t off : kOffsets) {
        const auto [N, C] = sh;
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(name(table_t));
        CAPTURE(off);
        TensorPair table = pair_of(s, table_t, random_vector(V * C, 2, -2, 2), off);
        TensorPair ids = i32_pair(s, random_ids(N, 3, 0, V - 1), {N});
        TensorPair out = pair_of(s, DType::f32, std::vector<double>(N * C, 0.0), off);
        ops::embedding_forward(s.cpu, out.cpu, ids.cpu, table.cpu, N, C, V);
        ops::embedding_forward(s.gpu, out.gpu, ids.gpu, table.gpu, N, C, V);
        check_bits_equal(s, out, "out");
      }
    }
  }
}

TEST_CASE("residual forward and backward on cuda:0 give the CPU's bits (f32, the contract)") {
  CpuAndCuda s;
  for (int64_t n : kSizes) {
    for (int64_t off : kOffsets) {
      CAPTURE(n);
      CAPTURE(off);
      TensorPair a = pair_of(s, DType::f32, random_vector(n, 4), off);
      TensorPair b = pair_of(s, DType::f32, random_vector(n, 5), off);
      TensorPair out = pair_of(s, DType::f32, std::vector<double>(n, 0.0), off);
      ops::residual_forward(s.cpu, out.cpu, a.cpu, b.cpu, n);
      ops::residual_forward(s.gpu, out.gpu, a.gpu, b.gpu, n);
      check_bits_equal(s, out, "out");
      ops::residual_backward(s.cpu, a.cpu, b.cpu, out.cpu, n);
      ops::residual_backward(s.gpu, a.gpu, b.gpu, out.gpu, n);
      check_bits_equal(s, a, "da");
      check_bits_equal(s, b, "db");
      ops::residual_backward(s.cpu, a.cpu, a.cpu, out.cpu, n);  // da == db: dout twice
      ops::residual_backward(s.gpu, a.gpu, a.gpu, out.gpu, n);
      check_bits_equal(s, a, "da aliasing db");
    }
  }
}

TEST_CASE("adamw on cuda:0 writes the working copy and the fp32 state with the CPU's bits") {
  CpuAndCuda s;
  ops::AdamWConfig config;
  config.lr = 1e-2f, config.weight_decay = 0.1f, config.beta2 = 0.95f;
  for (int64_t n : kSizes) {
    for (int64_t off : kOffsets) {
      CAPTURE(n);
      CAPTURE(off);
      TensorPair p = pair_of(s, DType::f32, random_vector(n, 6), off);
      TensorPair m = pair_of(s, DType::f32, std::vector<double>(n, 0.0), off);
      TensorPair v = pair_of(s, DType::f32, std::vector<double>(n, 0.0), off);
      TensorPair w = pair_of(s, DType::bf16, std::vector<double>(n, 0.0), off);
      for (int64_t step = 1; step <= 3; ++step) {
        TensorPair g = pair_of(s, DType::f32, random_vector(n, 10 + step, -3, 3), off);
        ops::adamw_update(s.cpu, p.cpu, g.cpu, m.cpu, v.cpu, n, config, step, 0.37f, w.cpu);
        ops::adamw_update(s.gpu, p.gpu, g.gpu, m.gpu, v.gpu, n, config, step, 0.37f, w.gpu);
      }
      check_bits_equal(s, p, "params");
      check_bits_equal(s, m, "m");
      check_bits_equal(s, v, "v");
      check_bits_equal(s, w, "working");
    }
  }
}

TEST_CASE("swiglu forward and backward on cuda:0 match the CPU for every dtype combination") {
  CpuAndCuda s;
  for (int64_t n : kSizes) {
    for (int64_t off : kOffsets) {
      for (DType x_t : {DType::f32, DType::bf16}) {
        CAPTURE(n);
        CAPTURE(off);
        CAPTURE(name(x_t));
        TensorPair gate = pair_of(s, x_t, random_vector(n, 20, -6, 6), off);
        TensorPair up = pair_of(s, x_t, random_vector(n, 21, -2, 2), off);
        TensorPair out = pair_of(s, x_t, std::vector<double>(n, 0.0), off);
        ops::swiglu_forward(s.cpu, out.cpu, gate.cpu, up.cpu, n);
        ops::swiglu_forward(s.gpu, out.gpu, gate.gpu, up.gpu, n);
        check_close(s, out, 1e-5, 1e-6, "out");
        for (DType g_t : {DType::f32, DType::bf16}) {
          CAPTURE(name(g_t));
          TensorPair dout = pair_of(s, g_t, random_vector(n, 22), off);
          TensorPair dgate = pair_of(s, x_t, std::vector<double>(n, 0.0), off);
          TensorPair dup = pair_of(s, x_t, std::vector<double>(n, 0.0), off);
          ops::swiglu_backward(s.cpu, dgate.cpu, dup.cpu, dout.cpu, gate.cpu, up.cpu, n);
          ops::swiglu_backward(s.gpu, dgate.gpu, dup.gpu, dout.gpu, gate.gpu, up.gpu, n);
          check_close(s, dgate, 1e-5, 1e-6, "dgate");
          check_close(s, dup, 1e-5, 1e-6, "dup");
        }
      }
    }
  }
}

TEST_CASE("rmsnorm forward and backward on cuda:0 match the CPU with bf16 weights and outputs") {
  CpuAndCuda s;
  const float eps = 1e-5f;
  struct Shape2 {
    int64_t N, C;
  };
  for (Shape2 sh :
       {Shape2{1, 1}, Shape2{3, 13}, Shape2{5, 64}, Shape2{257, 1000}, Shape2{300, 768}}) {
    for (int64_t off : kOffsets) {
      for (DType w_t : {DType::f32, DType::bf16}) {
        const auto [N, C] = sh;
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(off);
        CAPTURE(name(w_t));
        TensorPair x = pair_of(s, DType::f32, random_vector(N * C, 30, -2, 2), off);
        TensorPair w = pair_of(s, w_t, random_vector(C, 31, 0.5, 1.5), off);
        for (DType out_t : {DType::f32, DType::bf16}) {
          CAPTURE(name(out_t));
          TensorPair out = pair_of(s, out_t, std::vector<double>(N * C, 0.0), off);
          TensorPair rstd = pair_of(s, DType::f32, std::vector<double>(N, 0.0), off);
          ops::rmsnorm_forward(s.cpu, out.cpu, rstd.cpu, x.cpu, w.cpu, N, C, eps);
          ops::rmsnorm_forward(s.gpu, out.gpu, rstd.gpu, x.gpu, w.gpu, N, C, eps);
          check_close(s, out, 1e-5, 1e-6, "out");
          check_close(s, rstd, 1e-5, 1e-6, "rstd");
        }
        // Backward from one rstd on both, so only the backward differs.
        std::vector<double> r = random_vector(N, 32, 0.5, 2);
        TensorPair rstd = pair_of(s, DType::f32, r, off);
        TensorPair dy = pair_of(s, DType::f32, random_vector(N * C, 33), off);
        TensorPair dx = pair_of(s, DType::f32, random_vector(N * C, 34), off);
        TensorPair dw = pair_of(s, DType::f32, random_vector(C, 35), off);
        ops::rmsnorm_backward(s.cpu, dx.cpu, dw.cpu, dy.cpu, x.cpu, w.cpu, rstd.cpu, N, C);
        ops::rmsnorm_backward(s.gpu, dx.gpu, dw.gpu, dy.gpu, x.gpu, w.gpu, rstd.gpu, N, C);
        check_close(s, dx, 1e-5, 1e-5, "dinp");
        check_close(s, dw, 1e-5, 1e-5, "dweight");
      }
    }
  }
}

TEST_CASE("rope forward and backward on cuda:0 match the CPU on bf16 rows, in place too") {
  CpuAndCuda s;
  struct Shape4 {
    int64_t B, T, H, D;
  };
  for (Shape4 sh : {Shape4{1, 1, 1, 2}, Shape4{2, 5, 3, 14}, Shape4{2, 300, 4, 64},
                    Shape4{16, 33, 12, 64}, Shape4{1, 3, 2, 2064}}) {
    for (int64_t off : kOffsets) {
      const auto [B, T, H, D] = sh;
      const int64_t n = B * T * H * D;
      CAPTURE(n);
      CAPTURE(off);
      const ops::RopeFreq freq(500000.0);
      std::vector<double> x = random_vector(n, 40, -2, 2);
      const double atol = std::ldexp(max_abs(x), -20);  // outputs that cancel to ~0
      TensorPair inp = pair_of(s, DType::bf16, x, off);
      TensorPair out = pair_of(s, DType::bf16, std::vector<double>(n, 0.0), off);
      ops::rope_forward(s.cpu, out.cpu, inp.cpu, B, T, H, D, freq, 7);
      ops::rope_forward(s.gpu, out.gpu, inp.gpu, B, T, H, D, freq, 7);
      check_close(s, out, 0, atol, "out");
      ops::rope_backward(s.cpu, inp.cpu, inp.cpu, B, T, H, D, freq, 7);  // in place
      ops::rope_backward(s.gpu, inp.gpu, inp.gpu, B, T, H, D, freq, 7);
      check_close(s, inp, 0, atol, "dinp in place");
    }
  }
}
