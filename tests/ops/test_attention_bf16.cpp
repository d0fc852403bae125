// bf16 storage in CPU attention: forward and backward against the fp32 twin on the
// same bf16-rounded inputs, every dout dtype, with the fp32-math path (bit for bit)
// and with the AVX512-BF16 path (Note [bf16 dot attention]: within the rounding of
// P and dS, and exact scores); the dispatch of bf16 tensors, and the refusal of
// mixed storage dtypes.

#include <doctest/doctest.h>

#include <tbb/task_arena.h>

#include <cmath>
#include <string>
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

std::vector<uint16_t> bits(const std::vector<bf16>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = x[i].bits;
  return r;
}

// The fp32 twin's result rounded to bf16 once, as a bf16 store would.
std::vector<uint16_t> rounded_bits(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = float_to_bf16(x[i]);
  return r;
}

// Switches the AVX512-BF16 path for one scope, restoring the setting after.
struct Bf16Dot {
  explicit Bf16Dot(bool on) : previous(ops::cpu::set_attention_bf16_dot(on)) {}
  ~Bf16Dot() { ops::cpu::set_attention_bf16_dot(previous); }
  Bf16Dot(const Bf16Dot&) = delete;
  Bf16Dot& operator=(const Bf16Dot&) = delete;
  bool previous;
};

struct Case {
  int64_t B, T, H, KV, D;
};
const Case kCases[] = {{2, 45, 4, 2, 32}, {1, 70, 4, 1, 64}, {1, 1, 2, 2, 16}, {2, 33, 8, 2, 128}};

// bf16-exact inputs and the fp32 twin's forward and backward on them (the twin's
// backward takes out as the bf16 kernel stored it: out_r).
struct Twin {
  std::vector<bf16> q16, k16, v16, dout16;
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;
};

Twin make_twin(const Case& c, uint64_t seed) {
  const auto [B, T, H, KV, D] = c;
  Twin t;
  t.q16 = to_bf16(random_vector(B * T * H * D, seed, -2, 2));
  t.k16 = to_bf16(random_vector(B * T * KV * D, seed + 1, -2, 2));
  t.v16 = to_bf16(random_vector(B * T * KV * D, seed + 2, -2, 2));
  t.dout16 = to_bf16(random_vector(B * T * H * D, seed + 3));
  t.q = to_float(t.q16), t.k = to_float(t.k16), t.v = to_float(t.v16);
  t.dout = to_float(t.dout16);
  t.out.resize(t.q.size());
  t.lse.resize(B * H * T);
  ops::cpu::attention_forward_tiled<float>(t.out.data(), t.lse.data(), t.q.data(), t.k.data(),
                                           t.v.data(), B, T, T, H, KV, D);
  return t;
}

void twin_backward(Twin& t, const Case& c, const std::vector<float>& out_r) {
  const auto [B, T, H, KV, D] = c;
  t.dq.resize(t.q.size());
  t.dk.resize(t.k.size());
  t.dv.resize(t.v.size());
  ops::cpu::attention_backward_tiled<float, float>(
      t.dq.data(), t.dk.data(), t.dv.data(), t.dout.data(), t.q.data(), t.k.data(), t.v.data(),
      out_r.data(), t.lse.data(), B, T, H, KV, D);
}

}  // namespace

TEST_CASE("bf16 attention without the bf16 dot path is its fp32 twin rounded once") {
  // The fp32-math path computes the same fp32 values for both storage types, so every
  // bf16 result is the twin's rounded once at the store, bit for bit.
  Bf16Dot off(false);
  for (const Case& c : kCases) {
    const auto [B, T, H, KV, D] = c;
    CAPTURE(T);
    CAPTURE(D);
    Twin t = make_twin(c, 51);
    std::vector<float> lse_b(t.lse.size());
    std::vector<bf16> out16(t.q.size());
    ops::cpu::attention_forward_tiled<bf16>(out16.data(), lse_b.data(), t.q16.data(), t.k16.data(),
                                            t.v16.data(), B, T, T, H, KV, D);
    REQUIRE(max_abs(cast_vector<double>(t.out)) > 0.1);
    CHECK(bits(out16) == rounded_bits(t.out));
    CHECK(lse_b == t.lse);  // lse stays fp32 and sees the same fp32 values

    twin_backward(t, c, to_float(out16));
    if (T > 1) REQUIRE(max_abs(cast_vector<double>(t.dq)) > 0.1);
    std::vector<bf16> dq16(t.q.size()), dk16(t.k.size()), dv16(t.v.size());
    auto check_bf16 = [&] {
      CHECK(bits(dq16) == rounded_bits(t.dq));
      CHECK(bits(dk16) == rounded_bits(t.dk));
      CHECK(bits(dv16) == rounded_bits(t.dv));
    };
    ops::cpu::attention_backward_tiled<bf16, bf16>(
        dq16.data(), dk16.data(), dv16.data(), t.dout16.data(), t.q16.data(), t.k16.data(),
        t.v16.data(), out16.data(), t.lse.data(), B, T, H, KV, D);
    check_bf16();
    // dout in f32 holding the same values: the same result.
    ops::cpu::attention_backward_tiled<bf16, float>(
        dq16.data(), dk16.data(), dv16.data(), t.dout.data(), t.q16.data(), t.k16.data(),
        t.v16.data(), out16.data(), t.lse.data(), B, T, H, KV, D);
    check_bf16();
    // fp32 storage with a bf16 dout: no rounding anywhere, so the fp32 bits.
    auto out_r = to_float(out16);
    std::vector<float> dq_g(t.q.size()), dk_g(t.k.size()), dv_g(t.v.size());
    ops::cpu::attention_backward_tiled<float, bf16>(
        dq_g.data(), dk_g.data(), dv_g.data(), t.dout16.data(), t.q.data(), t.k.data(), t.v.data(),
        out_r.data(), t.lse.data(), B, T, H, KV, D);
    CHECK(dq_g == t.dq);
    CHECK(dk_g == t.dk);
    CHECK(dv_g == t.dv);
  }
}

namespace {

// The first-order effect of the bf16 dot path's roundings, per element, in double.
// P and dS are rounded to bf16 (relative error <= 2^-9 each) before the products
// that use them, so an element's error is at most 2^-9 of the sum of the absolute
// values of its terms: out_id: sum_j P_ij |v_jd| (P normalised); dv_jd: sum_i P_ij
// |dO_id|; dq_id: scale sum_j |dS_ij| |k_jd|; dk_jd: scale sum_i |dS_ij| |q_id|
// (summed over the group's heads for dk, dv). `noise` is the magnitude the fp32
// sums of dP and delta cancel from, dS's fp32 reordering error being 2^-24 D of it.
struct Bounds {
  std::vector<double> out, dq, dk, dv, noise_dq, noise_dk;
};

Bounds rounding_bounds(const Twin& t, const std::vector<float>& out, const Case& c) {
  const auto [B, T, H, KV, D] = c;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Bounds r{std::vector<double>(t.q.size()), std::vector<double>(t.q.size()),
           std::vector<double>(t.k.size()), std::vector<double>(t.k.size()),
           std::vector<double>(t.q.size()), std::vector<double>(t.k.size())};
  auto dot = [&](const float* a, const float* b, bool abs) {
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += abs ? std::fabs(a[d] * double{b[d]}) : a[d] * double{b[d]};
    return s;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t qi = ((b * T + i) * H + h) * D;
        const double delta = dot(&t.dout[qi], &out[qi], false);
        const double delta_abs = dot(&t.dout[qi], &out[qi], true);
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t kj = ((b * T + j) * KV + h / (H / KV)) * D;
          const double p =
              std::exp(scale * dot(&t.q[qi], &t.k[kj], false) - t.lse[(b * H + h) * T + i]);
          const double ds = std::fabs(p * (dot(&t.dout[qi], &t.v[kj], false) - delta));
          const double noise = p * (dot(&t.dout[qi], &t.v[kj], true) + delta_abs);
          for (int64_t d = 0; d < D; ++d) {
            r.out[qi + d] += p * std::fabs(t.v[kj + d]);
            r.dv[kj + d] += p * std::fabs(t.dout[qi + d]);
            r.dq[qi + d] += scale * ds * std::fabs(t.k[kj + d]);
            r.dk[kj + d] += scale * ds * std::fabs(t.q[qi + d]);
            r.noise_dq[qi + d] += scale * noise * std::fabs(t.k[kj + d]);
            r.noise_dk[kj + d] += scale * noise * std::fabs(t.q[qi + d]);
          }
        }
      }
  return r;
}

// |actual - expected| <= 2^-8 (|expected| + bound) + 2^-16 noise per element: twice
// the first-order bound 2^-9 (the store's rounding of the result plus the rounding
// of P or dS), the factor 2 covering second-order terms and fp32 reordering, which
// are 2^-9 and 2^-17 smaller; 2^-16 noise covers the fp32 cancellation in dP - delta.
bool within_rounding(const std::vector<bf16>& actual, const std::vector<float>& expected,
                     const std::vector<double>& bound, const std::vector<double>* noise,
                     std::string* why) {
  for (size_t e = 0; e < expected.size(); ++e) {
    const double a = ops::cpu::load(actual[e]), x = expected[e];
    const double tol = (std::fabs(x) + bound[e]) / 256 + (noise ? (*noise)[e] / 65536 : 0.0);
    if (!(std::fabs(a - x) <= tol)) {
      *why = "element " + std::to_string(e) + ": " + std::to_string(a) + " vs " +
             std::to_string(x) + ", tolerance " + std::to_string(tol);
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("bf16 attention on AVX512-BF16 is its fp32 twin up to the rounding of P and dS") {
  if (!ops::cpu::attention_bf16_dot_supported()) {
    MESSAGE("skipped: this CPU has no AVX512-BF16");
    return;
  }
  Bf16Dot on(true);
  REQUIRE(ops::cpu::attention_bf16_dot_enabled());
  for (const Case& c : kCases) {
    const auto [B, T, H, KV, D] = c;
    CAPTURE(T);
    CAPTURE(D);
    Twin t = make_twin(c, 71);
    std::vector<float> lse_b(t.lse.size());
    std::vector<bf16> out16(t.q.size());
    ops::cpu::attention_forward_tiled<bf16>(out16.data(), lse_b.data(), t.q16.data(), t.k16.data(),
                                            t.v16.data(), B, T, T, H, KV, D);
    auto out_r = to_float(out16);
    Bounds bound = rounding_bounds(t, out_r, c);
    std::string why;
    CHECK_MESSAGE(within_rounding(out16, t.out, bound.out, nullptr, &why), why);
    // The scores are exact products summed in another order: lse within fp32 noise.
    CHECK_MESSAGE(
        all_close(cast_vector<double>(lse_b), cast_vector<double>(t.lse), 1e-6, 1e-6, &why), why);
    if (T > 1) CHECK(bits(out16) != rounded_bits(t.out));  // not the fp32-math path

    twin_backward(t, c, out_r);
    std::vector<bf16> dq16(t.q.size()), dk16(t.k.size()), dv16(t.v.size());
    ops::cpu::attention_backward_tiled<bf16, bf16>(
        dq16.data(), dk16.data(), dv16.data(), t.dout16.data(), t.q16.data(), t.k16.data(),
        t.v16.data(), out16.data(), t.lse.data(), B, T, H, KV, D);
    CHECK_MESSAGE(within_rounding(dq16, t.dq, bound.dq, &bound.noise_dq, &why), why);
    CHECK_MESSAGE(within_rounding(dk16, t.dk, bound.dk, &bound.noise_dk, &why), why);
    CHECK_MESSAGE(within_rounding(dv16, t.dv, bound.dv, nullptr, &why), why);
    // dout in f32 holding the same (bf16-exact) values: the same bits.
    std::vector<bf16> dq_f(t.q.size()), dk_f(t.k.size()), dv_f(t.v.size());
    ops::cpu::attention_backward_tiled<bf16, float>(
        dq_f.data(), dk_f.data(), dv_f.data(), t.dout.data(), t.q16.data(), t.k16.data(),
        t.v16.data(), out16.data(), t.lse.data(), B, T, H, KV, D);
    CHECK(bits(dq_f) == bits(dq16));
    CHECK(bits(dk_f) == bits(dk16));
    CHECK(bits(dv_f) == bits(dv16));
  }
}

TEST_CASE("bf16 attention on AVX512-BF16 computes the scores exactly") {
  // Small integers in q and k with D = 64 (scale 1/8): every score is exact in fp32
  // in any summation order, in both paths. lse depends on the scores alone and the
  // softmax statistics stay fp32, so it must equal the twin's bit for bit, for a
  // KV cache (Tq < Tk) too.
  if (!ops::cpu::attention_bf16_dot_supported()) {
    MESSAGE("skipped: this CPU has no AVX512-BF16");
    return;
  }
  Bf16Dot on(true);
  for (const auto& [Tq, Tk] : {std::pair<int64_t, int64_t>{70, 70}, {5, 45}, {33, 100}}) {
    CAPTURE(Tq);
    const int64_t B = 2, H = 4, KV = 2, D = 64;
    auto integers = [](std::vector<double> x) {
      for (double& e : x) e = std::round(e);
      return to_bf16(x);
    };
    auto q16 = integers(random_vector(B * Tq * H * D, 81, -3, 3));
    auto k16 = integers(random_vector(B * Tk * KV * D, 82, -3, 3));
    auto v16 = to_bf16(random_vector(B * Tk * KV * D, 83, -2, 2));
    auto q = to_float(q16), k = to_float(k16), v = to_float(v16);
    std::vector<float> out(q.size()), lse(B * H * Tq), lse_b(lse.size());
    std::vector<bf16> out16(q.size());
    ops::cpu::attention_forward_tiled<float>(out.data(), lse.data(), q.data(), k.data(), v.data(),
                                             B, Tq, Tk, H, KV, D);
    ops::cpu::attention_forward_tiled<bf16>(out16.data(), lse_b.data(), q16.data(), k16.data(),
                                            v16.data(), B, Tq, Tk, H, KV, D);
    CHECK(lse_b == lse);
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

TEST_CASE("bf16 attention on AVX512-BF16 never reads a masked key and is thread-count free") {
  // Later keys and values changed: every out, lse and dq of a query at position <= p
  // keeps its bits (p inside a diagonal block and before whole key blocks); and a
  // one-thread arena gives the four-thread bits.
  if (!ops::cpu::attention_bf16_dot_supported()) {
    MESSAGE("skipped: this CPU has no AVX512-BF16");
    return;
  }
  Bf16Dot on(true);
  const Case c{2, 70, 4, 2, 32};
  const auto [B, T, H, KV, D] = c;
  struct Run {
    std::vector<bf16> out, dq, dk, dv;
    std::vector<float> lse;
  };
  auto run = [&](const Twin& t) {
    Run r{std::vector<bf16>(t.q.size()), std::vector<bf16>(t.q.size()),
          std::vector<bf16>(t.k.size()), std::vector<bf16>(t.k.size()),
          std::vector<float>(B * H * T)};
    ops::cpu::attention_forward_tiled<bf16>(r.out.data(), r.lse.data(), t.q16.data(), t.k16.data(),
                                            t.v16.data(), B, T, T, H, KV, D);
    ops::cpu::attention_backward_tiled<bf16, bf16>(
        r.dq.data(), r.dk.data(), r.dv.data(), t.dout16.data(), t.q16.data(), t.k16.data(),
        t.v16.data(), r.out.data(), r.lse.data(), B, T, H, KV, D);
    return r;
  };
  const Twin base = make_twin(c, 91);
  const Run a = run(base);
  for (int64_t p : {int64_t{0}, int64_t{37}, int64_t{65}}) {
    CAPTURE(p);
    Twin changed = base;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = p + 1; j < T; ++j)
        for (int64_t x = 0; x < KV * D; ++x) {
          const int64_t at = (b * T + j) * KV * D + x;
          changed.k16[at].bits = float_to_bf16(30.0f - changed.k[at]);
          changed.v16[at].bits = float_to_bf16(50.0f * changed.v[at] + 3.0f);
        }
    const Run r = run(changed);
    CHECK(bits(r.out) != bits(a.out));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i <= p; ++i) {
        for (int64_t x = 0; x < H * D; ++x) {
          const int64_t at = (b * T + i) * H * D + x;
          REQUIRE(r.out[at].bits == a.out[at].bits);
          REQUIRE(r.dq[at].bits == a.dq[at].bits);
        }
        for (int64_t h = 0; h < H; ++h)
          REQUIRE(r.lse[(b * H + h) * T + i] == a.lse[(b * H + h) * T + i]);
      }
  }
  Run one, four;
  tbb::task_arena(1).execute([&] { one = run(base); });
  tbb::task_arena(4).execute([&] { four = run(base); });
  CHECK(bits(one.out) == bits(four.out));
  CHECK(one.lse == four.lse);
  CHECK(bits(one.dq) == bits(four.dq));
  CHECK(bits(one.dk) == bits(four.dk));
  CHECK(bits(one.dv) == bits(four.dv));
}
