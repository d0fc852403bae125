// AdamW: three steps against torch's formula written out in double, against values
// recorded from torch.optim.AdamW, decoupled weight decay, grad_scale, and the f32
// dispatch against double; the bf16 working copy written in the same pass.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/core/check.h"
#include "ops/adamw.h"
#include "ops/cast.h"
#include "ops/cpu/adamw.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
const int64_t kSizes[] = {1, 5, 33, 10007};

struct State {
  std::vector<double> p, m, v;
};

// torch.optim.AdamW's update, written out directly in double.
void adamw_reference(State& s, const std::vector<double>& g, const ops::AdamWConfig& c,
                     int64_t step) {
  double lr = c.lr, b1 = c.beta1, b2 = c.beta2, eps = c.eps, wd = c.weight_decay;
  for (size_t i = 0; i < g.size(); ++i) {
    s.p[i] *= 1 - lr * wd;
    s.m[i] = b1 * s.m[i] + (1 - b1) * g[i];
    s.v[i] = b2 * s.v[i] + (1 - b2) * g[i] * g[i];
    double bias_correction1 = 1 - std::pow(b1, step);
    double bias_correction2 = 1 - std::pow(b2, step);
    double denom = std::sqrt(s.v[i]) / std::sqrt(bias_correction2) + eps;
    s.p[i] -= lr / bias_correction1 * s.m[i] / denom;
  }
}

void adamw_double(State& s, const std::vector<double>& g, const ops::AdamWConfig& c, int64_t step,
                  double grad_scale = 1.0) {
  ops::cpu::adamw_update<double>(s.p.data(), g.data(), s.m.data(), s.v.data(),
                                 static_cast<int64_t>(g.size()), c.lr, c.beta1, c.beta2, c.eps,
                                 c.weight_decay, step, grad_scale);
}

State initial_state(int64_t n, uint64_t seed) {
  return {random_vector(n, seed, -2, 2), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
}

const ops::AdamWConfig kConfig{0.1f, 0.9f, 0.95f, 1e-8f, 0.1f};
}  // namespace

TEST_CASE("adamw three steps match the torch formula in double") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    State expected = initial_state(n, 1), actual = expected;
    for (int64_t step = 1; step <= 3; ++step) {
      auto g = random_vector(n, 10 + step);
      adamw_reference(expected, g, kConfig, step);
      adamw_double(actual, g, kConfig, step);
    }
    REQUIRE(max_abs(expected.m) > 0.01);
    std::string why;
    CHECK_MESSAGE(all_close(actual.p, expected.p, 1e-12, 1e-14, &why), why);
    CHECK_MESSAGE(all_close(actual.m, expected.m, 1e-12, 1e-14, &why), why);
    CHECK_MESSAGE(all_close(actual.v, expected.v, 1e-12, 1e-14, &why), why);
  }
}

TEST_CASE("adamw matches values recorded from torch.optim.AdamW") {
  // Recorded with torch 1.13 (CPU, fp32):
  //   import torch
  //   p = torch.nn.Parameter(torch.tensor([0.5, -1.25, 2.0, 0.0, -0.1]))
  //   opt = torch.optim.AdamW([p], lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
  //   gs = [[0.1, -0.2, 0.3, 1.5, -0.05], [-0.3, 0.4, 0.1, -1.0, 0.0], [0.2, 0.2, -0.7, 0.5, 0.01]]
  //   for g in gs:
  //       p.grad = torch.tensor(g); opt.step()
  //       print(', '.join('%.9g' % x for x in p.tolist()))
  //   print(', '.join('%.9g' % x for x in opt.state[p]['exp_avg'].tolist()))
  //   print(', '.join('%.9g' % x for x in opt.state[p]['exp_avg_sq'].tolist()))
  const std::vector<std::vector<double>> torch_p = {
      {0.395000011, -1.13749993, 1.88, -0.099999994, 0.000999987125},
      {0.439979583, -1.16246235, 1.77320385, -0.113522448, 0.0688547492},
      {0.433710665, -1.20277321, 1.78548586, -0.140646294, 0.107325293}};
  const std::vector<double> torch_m = {0.00109999918, 0.0397999994, -0.0366999991, 0.0815000087,
                                       -0.00305000017};
  const std::vector<double> torch_v = {0.00672625052, 0.0114050014, 0.02903625, 0.161531255,
                                       0.000117812502};
  const std::vector<std::vector<double>> grads = {
      {0.1, -0.2, 0.3, 1.5, -0.05}, {-0.3, 0.4, 0.1, -1.0, 0.0}, {0.2, 0.2, -0.7, 0.5, 0.01}};
  Stream s(cpu_device(0), "cpu:0 compute");
  Tensor p = f32_tensor(s, {0.5, -1.25, 2.0, 0.0, -0.1}, {5});
  Tensor m = f32_tensor(s, std::vector<double>(5, 0.0), {5});
  Tensor v = f32_tensor(s, std::vector<double>(5, 0.0), {5});
  std::string why;
  for (int64_t step = 1; step <= 3; ++step) {
    CAPTURE(step);
    Tensor g = f32_tensor(s, grads[step - 1], {5});
    ops::adamw_update(s, p, g, m, v, 5, kConfig, step, 1.0f);
    CHECK_MESSAGE(all_close(f32_values(s, p), torch_p[step - 1], 1e-6, 1e-7, &why), why);
  }
  CHECK_MESSAGE(all_close(f32_values(s, m), torch_m, 1e-6, 1e-9, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, v), torch_v, 1e-6, 1e-9, &why), why);
}

TEST_CASE("adamw weight decay shrinks params without touching the moments") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    ops::AdamWConfig no_decay = kConfig;
    no_decay.weight_decay = 0;
    State with = initial_state(n, 2), without = with;
    auto p0 = with.p;
    auto g = random_vector(n, 3);
    adamw_double(with, g, kConfig, 1);
    adamw_double(without, g, no_decay, 1);
    // Decoupled: the decay is lr * wd * p, outside the moments.
    CHECK(with.m == without.m);
    CHECK(with.v == without.v);
    std::vector<double> diff(n), expected(n);
    for (int64_t i = 0; i < n; ++i) {
      diff[i] = with.p[i] - without.p[i];
      expected[i] = -double(kConfig.lr) * double(kConfig.weight_decay) * p0[i];
    }
    REQUIRE(max_abs(expected) > 1e-3);
    std::string why;
    CHECK_MESSAGE(all_close(diff, expected, 1e-9, 1e-12, &why), why);
  }
}

TEST_CASE("adamw grad_scale equals pre-scaled gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const float scale = 0.3f;
  for (int64_t n : kSizes) {
    CAPTURE(n);
    auto p0 = random_vector(n, 4, -2, 2);
    auto g = random_vector(n, 5);
    std::vector<double> scaled(n);
    for (int64_t i = 0; i < n; ++i) scaled[i] = static_cast<float>(g[i]) * scale;  // in fp32
    Tensor pa = f32_tensor(s, p0, {n}), pb = f32_tensor(s, p0, {n});
    Tensor ma = f32_tensor(s, std::vector<double>(n, 0.0), {n}),
           mb = f32_tensor(s, std::vector<double>(n, 0.0), {n});
    Tensor va = f32_tensor(s, std::vector<double>(n, 0.0), {n}),
           vb = f32_tensor(s, std::vector<double>(n, 0.0), {n});
    Tensor ga = f32_tensor(s, g, {n}), gb = f32_tensor(s, scaled, {n});
    for (int64_t step = 1; step <= 2; ++step) {
      ops::adamw_update(s, pa, ga, ma, va, n, kConfig, step, scale);
      ops::adamw_update(s, pb, gb, mb, vb, n, kConfig, step, 1.0f);
    }
    auto m = f32_values(s, ma);
    REQUIRE(max_abs(m) > 1e-3);
    CHECK(m == f32_values(s, mb));
    CHECK(f32_values(s, va) == f32_values(s, vb));
    CHECK(f32_values(s, pa) == f32_values(s, pb));
  }
}

TEST_CASE("adamw f32 dispatch on a CPU device agrees with double") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t n : kSizes) {
    CAPTURE(n);
    State expected = initial_state(n, 6);
    Tensor p = f32_tensor(s, expected.p, {n});
    Tensor m = f32_tensor(s, expected.m, {n}), v = f32_tensor(s, expected.v, {n});
    for (int64_t step = 1; step <= 3; ++step) {
      auto g = random_vector(n, 20 + step);
      adamw_double(expected, g, kConfig, step, 0.5);
      ops::adamw_update(s, p, f32_tensor(s, g, {n}), m, v, n, kConfig, step, 0.5f);
    }
    REQUIRE(max_abs(expected.p) > 0.1);
    std::string why;
    CHECK_MESSAGE(all_close(f32_values(s, p), expected.p, 1e-5, 1e-6, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, m), expected.m, 1e-5, 1e-7, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, v), expected.v, 1e-5, 1e-8, &why), why);
  }
}

// f32 AdamW with every operation rounded once, as IEEE float arithmetic without FMA
// does: each product, sum, quotient and root is exact in double (or rounded there
// harmlessly: 53 >= 2 * 24 + 2 bits) and then rounded to float. The CUDA kernel
// computes exactly this with its _rn intrinsics.
void adamw_float_ops(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                     std::vector<float>& v, const ops::AdamWConfig& c, int64_t step, float scale) {
  auto f = [](double x) { return static_cast<float>(x); };
  const double lr = c.lr, wd = c.weight_decay, b1 = c.beta1, b2 = c.beta2;
  const float decay = f(1.0 - lr * wd), fb1 = f(b1), omb1 = f(1.0 - b1), fb2 = f(b2),
              omb2 = f(1.0 - b2), eps = f(c.eps);
  const float neg_step = f(-lr / (1.0 - std::pow(b1, static_cast<double>(step))));
  const float bc2_sqrt = f(std::sqrt(1.0 - std::pow(b2, static_cast<double>(step))));
  for (size_t i = 0; i < p.size(); ++i) {
    const float gi = f(double{g[i]} * scale), pi = f(double{p[i]} * decay);
    m[i] = f(double{f(double{m[i]} * fb1)} + f(double{omb1} * gi));
    v[i] = f(double{f(double{v[i]} * fb2)} + f(double{f(double{omb2} * gi)} * gi));
    const float denom = f(double{f(double{f(std::sqrt(double{v[i]}))} / bc2_sqrt)} + eps);
    p[i] = f(double{pi} + f(double{f(double{neg_step} * m[i])} / denom));
  }
}

TEST_CASE("adamw rounds each operation once, as the CUDA kernel does: no FMA on any CPU") {
  // Bit equality with CUDA needs the CPU loop (every target clone) to round like
  // float arithmetic without contraction; an FMA anywhere changes some elements.
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t n = 10007;
  State init = initial_state(n, 8);
  std::vector<float> p(init.p.begin(), init.p.end()), m(n, 0.0f), v(n, 0.0f);
  Tensor tp = f32_tensor(s, init.p, {n}), tm = f32_tensor(s, init.m, {n});
  Tensor tv = f32_tensor(s, init.v, {n});
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<double> g = random_vector(n, 40 + step, -3, 3);
    ops::adamw_update(s, tp, f32_tensor(s, g, {n}), tm, tv, n, kConfig, step, 0.37f);
    adamw_float_ops(p, std::vector<float>(g.begin(), g.end()), m, v, kConfig, step, 0.37f);
  }
  CHECK(tensor_to_vector<float>(s, tm) == m);
  CHECK(tensor_to_vector<float>(s, tv) == v);
  CHECK(tensor_to_vector<float>(s, tp) == p);
}

TEST_CASE("adamw rejects a step count below one and invalid betas") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Tensor t = f32_tensor(s, {1.0}, {1});
  CHECK_THROWS_AS(ops::adamw_update(s, t, t, t, t, 1, kConfig, 0, 1.0f), Error);
  ops::AdamWConfig bad = kConfig;
  bad.beta2 = 1.0f;
  CHECK_THROWS_AS(ops::adamw_update(s, t, t, t, t, 1, bad, 1, 1.0f), Error);
}

TEST_CASE("adamw writing the bf16 working copy equals adamw then cast_f32_to_bf16, bit for bit") {
  Stream s(cpu_device(0), "cpu:0 compute");
  // 10007 crosses the 4096-element chunks; 5 and 1 stay inside one.
  for (int64_t n : kSizes) {
    CAPTURE(n);
    State init = initial_state(n, 7);
    Tensor p1 = f32_tensor(s, init.p, {n}), p2 = f32_tensor(s, init.p, {n});
    Tensor m1 = f32_tensor(s, init.m, {n}), m2 = f32_tensor(s, init.m, {n});
    Tensor v1 = f32_tensor(s, init.v, {n}), v2 = f32_tensor(s, init.v, {n});
    Tensor w_fused = Tensor::empty({n}, DType::bf16, s.device());
    Tensor w_cast = Tensor::empty({n}, DType::bf16, s.device());
    for (int64_t step = 1; step <= 3; ++step) {
      Tensor g = f32_tensor(s, random_vector(n, 30 + step), {n});
      ops::adamw_update(s, p1, g, m1, v1, n, kConfig, step, 0.5f, w_fused);
      ops::adamw_update(s, p2, g, m2, v2, n, kConfig, step, 0.5f);
      ops::cast_f32_to_bf16(s, w_cast, p2, n);
      // The fp32 state is what it is without the working copy.
      CHECK(tensor_to_vector<float>(s, p1) == tensor_to_vector<float>(s, p2));
      CHECK(tensor_to_vector<float>(s, m1) == tensor_to_vector<float>(s, m2));
      CHECK(tensor_to_vector<float>(s, v1) == tensor_to_vector<float>(s, v2));
      std::vector<uint16_t> fused = tensor_to_vector<uint16_t>(s, w_fused);
      CHECK(fused == tensor_to_vector<uint16_t>(s, w_cast));
      CHECK(std::any_of(fused.begin(), fused.end(), [](uint16_t b) { return (b & 0x7fff) != 0; }));
    }
  }
}

TEST_CASE("adamw takes the working copy as bf16 of n elements only") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Tensor t = f32_tensor(s, {1.0, 2.0}, {2});
  CHECK_THROWS(ops::adamw_update(s, t, t, t, t, 2, kConfig, 1, 1.0f, f32_tensor(s, {0, 0}, {2})));
  CHECK_THROWS(ops::adamw_update(s, t, t, t, t, 2, kConfig, 1, 1.0f,
                                 Tensor::empty({1}, DType::bf16, s.device())));
}
