// Cross-entropy: forward against the direct double formula, backward against
// central finite differences of (loss sum / normalizer), ignored rows equal removed
// rows, in-place backward, the all-ignored batch, bad targets, and torch values.
// A bf16 dlogits (the bf16 contract) is the f32 dlogits rounded once.

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>

#include "engine/core/check.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cross_entropy.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct Sizes {
  int64_t N, V;
};
const Sizes kSizes[] = {{1, 1}, {1, 7}, {3, 5}, {5, 33}, {6, 259}};
constexpr int32_t kIgnore = -100;

// Random class ids from a fixed seed; every third row (from row 1) is ignored.
std::vector<int32_t> random_targets(int64_t N, int64_t V, uint64_t seed, bool with_ignored = true) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, V - 1);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n)
    t[n] = with_ignored && n % 3 == 1 ? kIgnore : static_cast<int32_t>(dist(rng));
  return t;
}

// {loss sum, count} from the double kernel.
std::vector<double> forward_double(const std::vector<double>& x, const std::vector<int32_t>& t,
                                   int64_t N, int64_t V) {
  std::vector<double> stats(2);
  ops::cpu::cross_entropy_forward<double>(stats.data(), x.data(), t.data(), N, V, kIgnore);
  return stats;
}

// x as the f32 tensor holds it.
std::vector<double> x_as_f32(const std::vector<double>& x) {
  return cast_vector<double>(cast_vector<float>(x));
}

Tensor i32_tensor(Stream& s, const std::vector<int32_t>& values) {
  return tensor_from_vector(s, values, {static_cast<int64_t>(values.size())}, DType::i32,
                            s.device());
}
}  // namespace

TEST_CASE("cross-entropy forward matches the direct double formula") {
  for (auto [N, V] : kSizes) {
    CAPTURE(N);
    CAPTURE(V);
    auto x = random_vector(N * V, 1, -4, 4);
    auto t = random_targets(N, V, 2);
    double expected = 0;
    int64_t count = 0;
    for (int64_t n = 0; n < N; ++n) {
      if (t[n] == kIgnore) continue;
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(x[n * V + v]);
      expected += -std::log(std::exp(x[n * V + t[n]]) / z);
      ++count;
    }
    if (V > 1) REQUIRE(expected > 0.1);  // with V = 1 every loss is log(1) = 0
    auto stats = forward_double(x, t, N, V);
    CHECK(stats[0] == doctest::Approx(expected).epsilon(1e-12));
    CHECK(stats[1] == count);
  }
}

TEST_CASE("cross-entropy forward is stable for large logits") {
  std::vector<double> x = {1000, 1001, 999, -1000, 3000, 2999};
  std::vector<int32_t> t = {1, 2};
  auto stats = forward_double(x, t, 2, 3);
  double row0 = std::log(std::exp(-1.0) + 1 + std::exp(-2.0));
  double row1 = std::log(1 + std::exp(-1.0)) + 1;
  REQUIRE(std::isfinite(stats[0]));
  CHECK(stats[0] == doctest::Approx(row0 + row1).epsilon(1e-12));
}

TEST_CASE("cross-entropy backward matches central finite differences of loss sum over normalizer") {
  for (auto [N, V] : kSizes) {
    CAPTURE(N);
    CAPTURE(V);
    auto x = random_vector(N * V, 3, -4, 4);
    auto t = random_targets(N, V, 4);
    double normalizer = 7.5;               // a global count: not this batch's own
    std::vector<double> dx(N * V, 123.0);  // overwritten, not accumulated
    ops::cpu::cross_entropy_backward<double>(dx.data(), x.data(), t.data(), N, V, kIgnore,
                                             normalizer);
    auto g = numeric_grad(
        [&](const std::vector<double>& v) { return forward_double(v, t, N, V)[0] / normalizer; },
        x);
    if (V > 1) REQUIRE(max_abs(g) > 1e-3);  // with V = 1 the loss is constant
    std::string why;
    CHECK_MESSAGE(all_close(dx, g, 1e-6, 1e-9, &why), why);
  }
}

TEST_CASE("cross-entropy with ignored rows equals the same batch with those rows removed") {
  Stream s(cpu_device(0), "cpu:0 compute");
  int64_t N = 7, V = 33;
  auto x = random_vector(N * V, 5, -4, 4);
  auto t = random_targets(N, V, 6);  // rows 1 and 4 ignored
  std::vector<double> kept_x;
  std::vector<int32_t> kept_t;
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] == kIgnore) continue;
    kept_x.insert(kept_x.end(), x.begin() + n * V, x.begin() + (n + 1) * V);
    kept_t.push_back(t[n]);
  }
  int64_t K = static_cast<int64_t>(kept_t.size());
  REQUIRE(K == 5);
  float normalizer = 11.0f;

  Tensor tx = f32_tensor(s, x, {N, V}), tt = i32_tensor(s, t);
  Tensor stats = Tensor::empty({2}, DType::f32, cpu_device(0));
  Tensor dx = Tensor::empty({N, V}, DType::f32, cpu_device(0));
  ops::cross_entropy_forward(s, stats, tx, tt, N, V, kIgnore);
  ops::cross_entropy_backward(s, dx, tx, tt, N, V, kIgnore, normalizer);

  Tensor kx = f32_tensor(s, kept_x, {K, V}), kt = i32_tensor(s, kept_t);
  Tensor kstats = Tensor::empty({2}, DType::f32, cpu_device(0));
  Tensor kdx = Tensor::empty({K, V}, DType::f32, cpu_device(0));
  ops::cross_entropy_forward(s, kstats, kx, kt, K, V, kIgnore);
  ops::cross_entropy_backward(s, kdx, kx, kt, K, V, kIgnore, normalizer);

  auto full = f32_values(s, stats), kept = f32_values(s, kstats);
  REQUIRE(kept[0] > 1.0);
  CHECK(full[0] == kept[0]);  // ignored rows add exactly 0 to the sum
  CHECK(full[1] == kept[1]);
  CHECK(full[1] == K);
  auto g = f32_values(s, dx), kg = f32_values(s, kdx);
  REQUIRE(max_abs(kg) > 1e-3);
  std::vector<double> g_kept;
  for (int64_t n = 0; n < N; ++n) {
    bool ignored = t[n] == kIgnore;
    for (int64_t v = 0; v < V; ++v) {
      if (ignored)
        CHECK(g[n * V + v] == 0.0);
      else
        g_kept.push_back(g[n * V + v]);
    }
  }
  CHECK(g_kept == kg);
}

TEST_CASE("cross-entropy backward in place on the logits gives the same gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, V] : kSizes) {
    CAPTURE(N);
    CAPTURE(V);
    auto x = random_vector(N * V, 7, -4, 4);
    auto t = random_targets(N, V, 8);
    Tensor tx = f32_tensor(s, x, {N, V}), tt = i32_tensor(s, t);
    Tensor dx = Tensor::empty({N, V}, DType::f32, cpu_device(0));
    ops::cross_entropy_backward(s, dx, tx, tt, N, V, kIgnore, 3.0f);
    ops::cross_entropy_backward(s, tx, tx, tt, N, V, kIgnore, 3.0f);
    auto separate = f32_values(s, dx);
    if (V > 1) REQUIRE(max_abs(separate) > 1e-3);
    CHECK(f32_values(s, tx) == separate);
  }
}

TEST_CASE("cross-entropy with every row ignored gives zero loss zero count and zero gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  int64_t N = 3, V = 5;
  Tensor tx = f32_tensor(s, random_vector(N * V, 9, -4, 4), {N, V});
  Tensor tt = i32_tensor(s, std::vector<int32_t>(N, kIgnore));
  Tensor stats = f32_tensor(s, {42, 42}, {2});
  Tensor dx = f32_tensor(s, std::vector<double>(N * V, 42), {N, V});
  ops::cross_entropy_forward(s, stats, tx, tt, N, V, kIgnore);
  ops::cross_entropy_backward(s, dx, tx, tt, N, V, kIgnore, 1.0f);
  CHECK(f32_values(s, stats) == std::vector<double>{0, 0});
  CHECK(f32_values(s, dx) == std::vector<double>(N * V, 0.0));
}

TEST_CASE("cross-entropy rejects a target outside the vocabulary") {
  Stream s(cpu_device(0), "cpu:0 compute");
  int64_t N = 3, V = 259;
  Tensor tx = f32_tensor(s, random_vector(N * V, 10, -4, 4), {N, V});
  Tensor stats = Tensor::empty({2}, DType::f32, cpu_device(0));
  Tensor dx = Tensor::empty({N, V}, DType::f32, cpu_device(0));
  Tensor high = i32_tensor(s, {5, 300, kIgnore});
  ops::cross_entropy_forward(s, stats, tx, high, N, V, kIgnore);
  std::string msg = error_message([&] { s.synchronize(); });
  CAPTURE(msg);
  CHECK(msg.find("target id 300 is out of range for vocabulary size 259") != std::string::npos);

  ops::cross_entropy_backward(s, dx, tx, high, N, V, kIgnore, 1.0f);
  CHECK(error_message([&] { s.synchronize(); }).find("target id 300") != std::string::npos);

  // -1 is a bad target when ignore_index is -100, and a skipped row when it is -1.
  Tensor minus_one = i32_tensor(s, {5, -1, 0});
  ops::cross_entropy_forward(s, stats, tx, minus_one, N, V, kIgnore);
  CHECK(error_message([&] { s.synchronize(); }).find("target id -1") != std::string::npos);
  ops::cross_entropy_forward(s, stats, tx, minus_one, N, V, -1);
  CHECK(f32_values(s, stats)[1] == 2);  // the stream works again after the error
}

TEST_CASE("cross-entropy matches torch F.cross_entropy with ignore_index") {
  // Recorded with torch 1.13:
  //   import torch, torch.nn.functional as F
  //   x = torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.25, 0.0, -1.0, 2.0], [-3.0, 1.5, 2.5, -0.5]],
  //                    requires_grad=True)
  //   t = torch.tensor([3, -100, 0])
  //   l = F.cross_entropy(x, t, ignore_index=-100, reduction='sum'); l.backward()
  //   print('%.9g' % l.item(), ', '.join('%.9g' % v for v in x.grad.flatten().tolist()))
  const double torch_loss = 6.05414438;
  const std::vector<double> torch_grad = {
      0.110553734, 0.00550414762, 0.067054227, -0.183112144, 0,          0, 0,
      0,           -0.997125566,  0.258750558, 0.703356922,  0.035018079};
  Stream s(cpu_device(0), "cpu:0 compute");
  Tensor tx =
      f32_tensor(s, {1.0, -2.0, 0.5, 3.0, 0.25, 0.0, -1.0, 2.0, -3.0, 1.5, 2.5, -0.5}, {3, 4});
  Tensor tt = i32_tensor(s, {3, kIgnore, 0});
  Tensor stats = Tensor::empty({2}, DType::f32, cpu_device(0));
  Tensor dx = Tensor::empty({3, 4}, DType::f32, cpu_device(0));
  ops::cross_entropy_forward(s, stats, tx, tt, 3, 4, kIgnore);
  ops::cross_entropy_backward(s, dx, tx, tt, 3, 4, kIgnore, 1.0f);
  auto st = f32_values(s, stats);
  CHECK(st[0] == doctest::Approx(torch_loss).epsilon(1e-6));
  CHECK(st[1] == 2);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, dx), torch_grad, 1e-6, 1e-7, &why), why);
}

TEST_CASE("cross-entropy f32 dispatch on a CPU device agrees with double") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, V] : kSizes) {
    CAPTURE(N);
    CAPTURE(V);
    auto x = random_vector(N * V, 11, -4, 4);
    auto t = random_targets(N, V, 12);
    auto stats = forward_double(x, t, N, V);
    std::vector<double> dx(N * V);
    ops::cpu::cross_entropy_backward<double>(dx.data(), x.data(), t.data(), N, V, kIgnore, 4.0);
    if (V > 1) REQUIRE(max_abs(dx) > 1e-3);
    Tensor tx = f32_tensor(s, x, {N, V}), tt = i32_tensor(s, t);
    Tensor tstats = Tensor::empty({2}, DType::f32, cpu_device(0));
    Tensor tdx = Tensor::empty({N, V}, DType::f32, cpu_device(0));
    ops::cross_entropy_forward(s, tstats, tx, tt, N, V, kIgnore);
    ops::cross_entropy_backward(s, tdx, tx, tt, N, V, kIgnore, 4.0f);
    std::string why;
    CHECK_MESSAGE(all_close(f32_values(s, tstats), stats, 1e-5, 1e-6, &why), why);
    CHECK_MESSAGE(all_close(f32_values(s, tdx), dx, 1e-5, 1e-7, &why), why);
  }
}

TEST_CASE("cross_entropy_backward to bf16 is the f32 dlogits rounded to bf16, bit for bit") {
  // The same float row, rounded once at the store: the tolerance is zero against
  // float_to_bf16 of the f32 result, ignored rows (+0) included.
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, V] : {Sizes{1, 1}, Sizes{5, 33}, Sizes{1024, 259}}) {
    CAPTURE(N);
    CAPTURE(V);
    auto x = random_vector(N * V, 51, -8, 8);
    auto t = random_targets(N, V, 52);
    Tensor tx = f32_tensor(s, x, {N, V}), tt = i32_tensor(s, t);
    Tensor d32 = Tensor::empty({N, V}, DType::f32, cpu_device(0));
    Tensor d16 = Tensor::empty({N, V}, DType::bf16, cpu_device(0));
    ops::cross_entropy_backward(s, d32, tx, tt, N, V, kIgnore, 700.0f);
    ops::cross_entropy_backward(s, d16, tx, tt, N, V, kIgnore, 700.0f);
    auto ref = f32_values(s, d32);
    if (V > 1) REQUIRE(max_abs(ref) > 1e-4);
    std::vector<uint16_t> expected;
    for (double v : ref) expected.push_back(float_to_bf16(static_cast<float>(v)));
    CHECK(bf16_bits(s, d16) == expected);
    CHECK(f32_values(s, tx) == x_as_f32(x));  // logits untouched
  }
}

TEST_CASE("cross_entropy refuses dtypes outside the bf16 contract") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 2, V = 3;
  Tensor tt = i32_tensor(s, {0, 2});
  Tensor f = Tensor::empty({N, V}, DType::f32, cpu_device(0));
  Tensor b = Tensor::empty({N, V}, DType::bf16, cpu_device(0));
  Tensor i = Tensor::empty({N, V}, DType::i32, cpu_device(0));
  Tensor stats = Tensor::empty({2}, DType::f32, cpu_device(0));
  CHECK_THROWS_AS(ops::cross_entropy_backward(s, f, b, tt, N, V, kIgnore, 1.0f), InternalError);
  CHECK_THROWS_AS(ops::cross_entropy_backward(s, b, b, tt, N, V, kIgnore, 1.0f), InternalError);
  CHECK_THROWS_AS(ops::cross_entropy_backward(s, i, f, tt, N, V, kIgnore, 1.0f), InternalError);
  CHECK_THROWS_AS(ops::cross_entropy_forward(s, stats, b, tt, N, V, kIgnore), InternalError);
}
