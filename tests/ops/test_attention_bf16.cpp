// bf16 storage in CPU attention: forward and backward against the fp32 twin on the
// same bf16-rounded inputs, every dout dtype, the dispatch of bf16 tensors, and the
// refusal of mixed storage dtypes.

#include <doctest/doctest.h>

#include <vector>

#include "engine/core/check.h"
#include "engine/core/dtype.h"
#include "ops/attention.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/bf16.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;
using ops::cpu::bf16;

namespace {

std::vector<bf16> to_bf16(const std::vector<double>& x) {
  std::vector<bf16> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i].bits = float_to_bf16(static_cast<float>(x[i]));
  return r;
}

template <typename T>
std::vector<float> to_float(const std::vector<T>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = ops::cpu::load(x[i]);
  return r;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& x) {
  return cast_vector<double>(to_float(x));
}

// One rounding to bf16 at the store moves a value by at most half an ulp: 2^-8 of
// its magnitude (8 significant bits). The kernel's fp32 math is the same for both
// storage types, so that is the whole allowed difference, per element.
constexpr double kBf16Rtol = 1.0 / 256;
// Only so that exact zeros (dq, dk with a single key) compare equal.
constexpr double kZero = 1e-30;

}  // namespace

TEST_CASE("bf16 attention equals its fp32 twin on the same inputs up to one rounding") {
  struct Case {
    int64_t B, T, H, KV, D;
  };
  for (auto [B, T, H, KV, D] : {Case{2, 45, 4, 2, 32}, Case{1, 70, 4, 1, 64}, Case{1, 1, 2, 2, 16},
                                Case{2, 33, 8, 2, 128}}) {
    CAPTURE(T);
    CAPTURE(D);
    auto q16 = to_bf16(random_vector(B * T * H * D, 51, -2, 2));
    auto k16 = to_bf16(random_vector(B * T * KV * D, 52, -2, 2));
    auto v16 = to_bf16(random_vector(B * T * KV * D, 53, -2, 2));
    auto dout16 = to_bf16(random_vector(B * T * H * D, 54));
    auto q = to_float(q16), k = to_float(k16), v = to_float(v16), dout = to_float(dout16);

    std::vector<float> out(q.size()), lse(B * H * T), lse_b(lse.size());
    std::vector<bf16> out16(q.size());
    ops::cpu::attention_forward_tiled<float>(out.data(), lse.data(), q.data(), k.data(), v.data(),
                                             B, T, T, H, KV, D);
    ops::cpu::attention_forward_tiled<bf16>(out16.data(), lse_b.data(), q16.data(), k16.data(),
                                            v16.data(), B, T, T, H, KV, D);
    REQUIRE(max_abs(cast_vector<double>(out)) > 0.1);
    std::string why;
    CHECK_MESSAGE(all_close(to_double(out16), cast_vector<double>(out), kBf16Rtol, kZero, &why),
                  why);
    // lse stays fp32 and sees the same fp32 values: no rounding at all.
    CHECK(lse_b == lse);

    // Backward twin: out as the bf16 forward stored it; dq, dk, dv round once.
    auto out_r = to_float(out16);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    ops::cpu::attention_backward_tiled<float, float>(dq.data(), dk.data(), dv.data(), dout.data(),
                                                     q.data(), k.data(), v.data(), out_r.data(),
                                                     lse.data(), B, T, H, KV, D);
    if (T > 1) REQUIRE(max_abs(cast_vector<double>(dq)) > 0.1);
    std::vector<bf16> dq16(q.size()), dk16(k.size()), dv16(v.size());
    auto check_bf16 = [&] {
      CHECK_MESSAGE(all_close(to_double(dq16), cast_vector<double>(dq), kBf16Rtol, kZero, &why),
                    why);
      CHECK_MESSAGE(all_close(to_double(dk16), cast_vector<double>(dk), kBf16Rtol, kZero, &why),
                    why);
      CHECK_MESSAGE(all_close(to_double(dv16), cast_vector<double>(dv), kBf16Rtol, kZero, &why),
                    why);
    };
    ops::cpu::attention_backward_tiled<bf16, bf16>(
        dq16.data(), dk16.data(), dv16.data(), dout16.data(), q16.data(), k16.data(), v16.data(),
        out16.data(), lse.data(), B, T, H, KV, D);
    check_bf16();
    // dout in f32 holding the same values: the same result.
    ops::cpu::attention_backward_tiled<bf16, float>(dq16.data(), dk16.data(), dv16.data(),
                                                    dout.data(), q16.data(), k16.data(), v16.data(),
                                                    out16.data(), lse.data(), B, T, H, KV, D);
    check_bf16();
    // fp32 storage with a bf16 dout: no rounding anywhere, so the fp32 bits.
    std::vector<float> dq_g(q.size()), dk_g(k.size()), dv_g(v.size());
    ops::cpu::attention_backward_tiled<float, bf16>(dq_g.data(), dk_g.data(), dv_g.data(),
                                                    dout16.data(), q.data(), k.data(), v.data(),
                                                    out_r.data(), lse.data(), B, T, H, KV, D);
    CHECK(dq_g == dq);
    CHECK(dk_g == dk);
    CHECK(dv_g == dv);
  }
}

TEST_CASE("attention dispatches bf16 tensors on a CPU device and refuses mixed dtypes") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t B = 2, T = 9, H = 4, KV = 2, D = 8;
  auto q16 = to_bf16(random_vector(B * T * H * D, 61, -2, 2));
  auto k16 = to_bf16(random_vector(B * T * KV * D, 62, -2, 2));
  auto v16 = to_bf16(random_vector(B * T * KV * D, 63, -2, 2));
  auto dout16 = to_bf16(random_vector(B * T * H * D, 64));
  Shape qs{B, T, H, D}, ks{B, T, KV, D};
  Device cpu = cpu_device(0);
  Tensor tq = tensor_from_vector(s, q16, qs, DType::bf16, cpu);
  Tensor tk = tensor_from_vector(s, k16, ks, DType::bf16, cpu);
  Tensor tv = tensor_from_vector(s, v16, ks, DType::bf16, cpu);
  Tensor tdout = tensor_from_vector(s, dout16, qs, DType::bf16, cpu);
  Tensor tout = Tensor::empty(qs, DType::bf16, cpu);
  Tensor tlse = Tensor::empty({B, H, T}, DType::f32, cpu);
  Tensor tdq = Tensor::empty(qs, DType::bf16, cpu);
  Tensor tdk = Tensor::empty(ks, DType::bf16, cpu), tdv = Tensor::empty(ks, DType::bf16, cpu);
  ops::attention_forward(s, tout, tlse, tq, tk, tv, B, T, T, H, KV, D);
  ops::attention_backward(s, tdq, tdk, tdv, tdout, tq, tk, tv, tout, tlse, B, T, H, KV, D);

  std::vector<bf16> out(q16.size()), dq(q16.size()), dk(k16.size()), dv(v16.size());
  std::vector<float> lse(B * H * T);
  ops::cpu::attention_forward_tiled<bf16>(out.data(), lse.data(), q16.data(), k16.data(),
                                          v16.data(), B, T, T, H, KV, D);
  ops::cpu::attention_backward_tiled<bf16, bf16>(dq.data(), dk.data(), dv.data(), dout16.data(),
                                                 q16.data(), k16.data(), v16.data(), out.data(),
                                                 lse.data(), B, T, H, KV, D);
  auto bits = [](const std::vector<bf16>& x) {
    std::vector<uint16_t> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = x[i].bits;
    return r;
  };
  CHECK(tensor_to_vector<uint16_t>(s, tout) == bits(out));
  CHECK(tensor_to_vector<float>(s, tlse) == lse);
  CHECK(tensor_to_vector<uint16_t>(s, tdq) == bits(dq));
  CHECK(tensor_to_vector<uint16_t>(s, tdk) == bits(dk));
  CHECK(tensor_to_vector<uint16_t>(s, tdv) == bits(dv));

  Tensor k32 = Tensor::empty(ks, DType::f32, cpu), q32 = Tensor::empty(qs, DType::f32, cpu);
  Tensor lse16 = Tensor::empty({B, H, T}, DType::bf16, cpu);
  CHECK_THROWS_AS(ops::attention_forward(s, tout, tlse, tq, k32, tv, B, T, T, H, KV, D),
                  InternalError);
  CHECK_THROWS_AS(ops::attention_forward(s, tout, lse16, tq, tk, tv, B, T, T, H, KV, D),
                  InternalError);
  CHECK_THROWS_AS(ops::attention_forward(s, q32, tlse, q32, tk, tv, B, T, T, H, KV, D),
                  InternalError);
  // dq in f32 while q is bf16: the gradients take the storage dtype of q, k, v.
  CHECK_THROWS_AS(
      ops::attention_backward(s, q32, tdk, tdv, tdout, tq, tk, tv, tout, tlse, B, T, H, KV, D),
      InternalError);
  s.synchronize();
}
