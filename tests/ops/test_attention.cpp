// Causal GQA attention: the GEMM reference's forward (out and lse) against a direct
// double implementation with an explicit scores matrix and repeated kv heads, the
// KV-cache property (Tq < Tk equals the last rows of the full computation), backward
// against central finite differences (all in double), and the f32 dispatch (the
// tiled kernel) against the reference. test_attention_tiled.cpp and
// test_attention_bf16.cpp test the tiled kernel itself.

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "ops/attention.h"
#include "ops/cpu/attention.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct Sizes {
  int64_t B, T, H, KV, D;
};
const Sizes kSizes[] = {{1, 1, 1, 1, 2}, {2, 5, 4, 2, 6}, {1, 6, 6, 3, 4},
                        {2, 4, 3, 3, 5}, {1, 7, 4, 1, 3}, {2, 3, 6, 2, 2}};

struct Forward {
  std::vector<double> out, lse;
};

Forward forward_double(const std::vector<double>& q, const std::vector<double>& k,
                       const std::vector<double>& v, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                       int64_t KV, int64_t D) {
  Forward f{std::vector<double>(B * Tq * H * D), std::vector<double>(B * H * Tq)};
  ops::cpu::attention_forward_gemm<double>(f.out.data(), f.lse.data(), q.data(), k.data(), v.data(),
                                           B, Tq, Tk, H, KV, D);
  return f;
}

// The textbook computation: repeat_kv to H heads, S = q k^T / sqrt(D) per (b, h),
// mask keys after the query's absolute position, softmax, P v.
Forward forward_reference(const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, int64_t B, int64_t Tq, int64_t Tk,
                          int64_t H, int64_t KV, int64_t D) {
  std::vector<double> kr(B * Tk * H * D), vr(B * Tk * H * D);  // (B, Tk, H, D)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Tk; ++j)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          int64_t src = ((b * Tk + j) * KV + h / (H / KV)) * D + d;
          kr[((b * Tk + j) * H + h) * D + d] = k[src];
          vr[((b * Tk + j) * H + h) * D + d] = v[src];
        }
  Forward f{std::vector<double>(B * Tq * H * D, 0.0), std::vector<double>(B * H * Tq)};
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> S(Tq * Tk);  // (Tq, Tk)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d)
            s += q[((b * Tq + i) * H + h) * D + d] * kr[((b * Tk + j) * H + h) * D + d];
          S[i * Tk + j] = j <= Tk - Tq + i ? s / std::sqrt(double(D)) : -inf;
        }
      for (int64_t i = 0; i < Tq; ++i) {
        double m = -inf, sum = 0;
        for (int64_t j = 0; j < Tk; ++j) m = std::max(m, S[i * Tk + j]);
        for (int64_t j = 0; j < Tk; ++j) sum += std::exp(S[i * Tk + j] - m);
        f.lse[(b * H + h) * Tq + i] = m + std::log(sum);
        for (int64_t j = 0; j < Tk; ++j) {
          double p = std::exp(S[i * Tk + j] - m) / sum;
          for (int64_t d = 0; d < D; ++d)
            f.out[((b * Tq + i) * H + h) * D + d] += p * vr[((b * Tk + j) * H + h) * D + d];
        }
      }
    }
  return f;
}

// Rows [T - Tq, T) of each batch entry of x (B, T, row).
std::vector<double> last_rows(const std::vector<double>& x, int64_t B, int64_t T, int64_t Tq,
                              int64_t row) {
  std::vector<double> r;
  for (int64_t b = 0; b < B; ++b)
    r.insert(r.end(), x.begin() + (b * T + T - Tq) * row, x.begin() + (b + 1) * T * row);
  return r;
}
}  // namespace

TEST_CASE("attention forward matches an explicit masked softmax with repeated kv heads") {
  for (auto [B, T, H, KV, D] : kSizes) {
    for (int64_t Tq : {T, (T + 1) / 2, int64_t{1}}) {  // Tq < Tk: queries at the end
      CAPTURE(B);
      CAPTURE(T);
      CAPTURE(Tq);
      CAPTURE(H);
      CAPTURE(KV);
      CAPTURE(D);
      auto q = random_vector(B * Tq * H * D, 1, -2, 2);
      auto k = random_vector(B * T * KV * D, 2, -2, 2);
      auto v = random_vector(B * T * KV * D, 3, -2, 2);
      auto expected = forward_reference(q, k, v, B, Tq, T, H, KV, D);
      auto actual = forward_double(q, k, v, B, Tq, T, H, KV, D);
      REQUIRE(max_abs(expected.out) > 0.1);
      REQUIRE(max_abs(expected.lse) > 0.1);
      std::string why;
      CHECK_MESSAGE(all_close(actual.out, expected.out, 1e-12, 1e-12, &why), why);
      CHECK_MESSAGE(all_close(actual.lse, expected.lse, 1e-12, 1e-12, &why), why);
    }
  }
}

TEST_CASE("attention with fewer queries than keys equals the last rows of the full computation") {
  // The KV-cache property: decoding Tq new tokens against Tk cached positions gives
  // what the full Tk x Tk causal attention gives for those rows.
  int64_t B = 2, T = 9, H = 6, KV = 3, D = 8;
  auto q = random_vector(B * T * H * D, 4, -2, 2);
  auto k = random_vector(B * T * KV * D, 5, -2, 2);
  auto v = random_vector(B * T * KV * D, 6, -2, 2);
  auto full = forward_double(q, k, v, B, T, T, H, KV, D);
  REQUIRE(max_abs(full.out) > 0.1);
  for (int64_t Tq : {int64_t{1}, int64_t{2}, int64_t{5}, T}) {
    CAPTURE(Tq);
    auto part = forward_double(last_rows(q, B, T, Tq, H * D), k, v, B, Tq, T, H, KV, D);
    std::vector<double> lse_expected;  // (B, H, Tq): the last Tq of each (b, h) row
    for (int64_t bh = 0; bh < B * H; ++bh)
      lse_expected.insert(lse_expected.end(), full.lse.begin() + bh * T + T - Tq,
                          full.lse.begin() + (bh + 1) * T);
    std::string why;
    CHECK_MESSAGE(all_close(part.out, last_rows(full.out, B, T, Tq, H * D), 1e-14, 1e-14, &why),
                  why);
    CHECK_MESSAGE(all_close(part.lse, lse_expected, 1e-14, 1e-14, &why), why);
  }
}

TEST_CASE("attention backward matches central finite differences") {
  for (auto [B, T, H, KV, D] : kSizes) {
    CAPTURE(B);
    CAPTURE(T);
    CAPTURE(H);
    CAPTURE(KV);
    CAPTURE(D);
    auto q = random_vector(B * T * H * D, 7, -2, 2);
    auto k = random_vector(B * T * KV * D, 8, -2, 2);
    auto v = random_vector(B * T * KV * D, 9, -2, 2);
    auto dout = random_vector(B * T * H * D, 10);
    auto f = forward_double(q, k, v, B, T, T, H, KV, D);
    std::vector<double> dq(q.size(), 7.0), dk(k.size(), 7.0), dv(v.size(), 7.0);  // overwritten
    ops::cpu::attention_backward_gemm<double>(dq.data(), dk.data(), dv.data(), dout.data(),
                                              q.data(), k.data(), v.data(), f.out.data(),
                                              f.lse.data(), B, T, H, KV, D);
    auto loss = [&](const std::vector<double>& q_, const std::vector<double>& k_,
                    const std::vector<double>& v_) {
      return dot(forward_double(q_, k_, v_, B, T, T, H, KV, D).out, dout);
    };
    auto gq = numeric_grad([&](const std::vector<double>& x) { return loss(x, k, v); }, q);
    auto gk = numeric_grad([&](const std::vector<double>& x) { return loss(q, x, v); }, k);
    auto gv = numeric_grad([&](const std::vector<double>& x) { return loss(q, k, x); }, v);
    if (T > 1) {  // with one key the softmax is constant: dq = dk = 0
      REQUIRE(max_abs(gq) > 1e-2);
      REQUIRE(max_abs(gk) > 1e-2);
    }
    REQUIRE(max_abs(gv) > 1e-2);
    std::string why;
    CHECK_MESSAGE(all_close(dq, gq, 1e-6, 1e-8, &why), why);
    CHECK_MESSAGE(all_close(dk, gk, 1e-6, 1e-8, &why), why);
    CHECK_MESSAGE(all_close(dv, gv, 1e-6, 1e-8, &why), why);
  }
}

TEST_CASE("attention f32 dispatch on a CPU device agrees with double and overwrites gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [B, T, H, KV, D] : {Sizes{2, 9, 4, 2, 8}, Sizes{1, 17, 6, 3, 16}}) {
    CAPTURE(H);
    CAPTURE(KV);
    auto q = random_vector(B * T * H * D, 11, -2, 2);
    auto k = random_vector(B * T * KV * D, 12, -2, 2);
    auto v = random_vector(B * T * KV * D, 13, -2, 2);
    auto dout = random_vector(B * T * H * D, 14);
    auto f = forward_double(q, k, v, B, T, T, H, KV, D);
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    ops::cpu::attention_backward_gemm<double>(dq.data(), dk.data(), dv.data(), dout.data(),
                                              q.data(), k.data(), v.data(), f.out.data(),
                                              f.lse.data(), B, T, H, KV, D);
    Shape qs{B, T, H, D}, ks{B, T, KV, D};
    Tensor tq = f32_tensor(s, q, qs), tk = f32_tensor(s, k, ks), tv = f32_tensor(s, v, ks);
    Tensor tdout = f32_tensor(s, dout, qs);
    Tensor tout = Tensor::empty(qs, DType::f32, cpu_device(0));
    Tensor tlse = Tensor::empty({B, H, T}, DType::f32, cpu_device(0));
    // Prior values that backward must overwrite, not accumulate onto.
    Tensor tdq = f32_tensor(s, std::vector<double>(q.size(), 0.25), qs);
    Tensor tdk = f32_tensor(s, std::vector<double>(k.size(), 0.25), ks);
    Tensor tdv = f32_tensor(s, std::vector<double>(v.size(), 0.25), ks);
    ops::attention_forward(s, tout, tlse, tq, tk, tv, B, T, T, H, KV, D);
    ops::attention_backward(s, tdq, tdk, tdv, tdout, tq, tk, tv, tout, tlse, B, T, H, KV, D);
    REQUIRE(max_abs(f.out) > 0.1);
    REQUIRE(max_abs(dq) > 0.1);
    std::string why;
    CHECK_MESSAGE(all_close(f32_values(s, tout), f.out, 1e-5, 1e-5, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, tlse), f.lse, 1e-5, 1e-5, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, tdq), dq, 1e-4, 1e-4, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, tdk), dk, 1e-4, 1e-4, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, tdv), dv, 1e-4, 1e-4, &why), why);
  }
}
