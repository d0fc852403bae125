// GPU: the flat-buffer kernels agree exactly with the CPU versions, the bf16 ones
// (--grad-comm bf16's rounding, sums and ring hops) included. A NaN stays a NaN,
// but its payload is the device's: CUDA arithmetic gives the canonical NaN, x86
// keeps the operand's.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "engine/core/dtype.h"
#include "engine/core/flat.h"

using namespace fanout;

namespace {

// The elements' bits, every NaN (f32, or bf16 in the low 16 bits) as one value.
template <typename Bits>
std::vector<Bits> nan_as_one(std::vector<Bits> bits) {
  constexpr int kExpShift = sizeof(Bits) == 2 ? 7 : 23;
  constexpr Bits kExp = 0xff, kMantissa = (Bits{1} << kExpShift) - 1;
  for (Bits& b : bits) {
    if (((b >> kExpShift) & kExp) == kExp && (b & kMantissa) != 0) b = static_cast<Bits>(~Bits{0});
  }
  return bits;
}

// The first index where a and b differ as nan_as_one sees them; a.size() if none.
template <typename Bits>
size_t first_difference(const std::vector<Bits>& a, const std::vector<Bits>& b) {
  REQUIRE(a.size() == b.size());
  std::vector<Bits> x = nan_as_one(a), y = nan_as_one(b);
  size_t i = 0;
  while (i < x.size() && x[i] == y[i]) ++i;
  return i;
}

}  // namespace

TEST_CASE("flat fill add and scale on cuda:0 equal the CPU results") {
  Stream gpu(cuda_device(0), "cuda:0 compute");
  for (int64_t n : {1, 255, 257, 1000003}) {
    CAPTURE(n);
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i)
      a[i] = static_cast<float>(i % 13), b[i] = static_cast<float>(i % 5);
    Tensor ta = tensor_from_vector(gpu, a, {n}, DType::f32, cuda_device(0));
    Tensor tb = tensor_from_vector(gpu, b, {n}, DType::f32, cuda_device(0));
    flat_add(gpu, ta, tb);
    flat_scale(gpu, ta, 2.0f);
    auto out = tensor_to_vector<float>(gpu, ta);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) ok &= out[i] == 2.0f * (a[i] + b[i]);
    CHECK(ok);
    flat_fill(gpu, tb, 1.5f);
    auto filled = tensor_to_vector<float>(gpu, tb);
    CHECK(filled[n - 1] == 1.5f);
  }
}

TEST_CASE("copies between cpu and cuda devices round-trip") {
  Stream gpu(cuda_device(0), "cuda:0 compute");
  std::vector<float> v(1001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  Tensor host = tensor_from_vector(gpu, v, {1001}, DType::f32, cpu_device(0));
  Tensor dev = Tensor::empty({1001}, DType::f32, cuda_device(0));
  Tensor back = Tensor::empty({1001}, DType::f32, cpu_device(0));
  tensor_copy(gpu, dev, host);
  tensor_copy(gpu, back, dev);
  gpu.synchronize();
  CHECK(std::memcmp(back.raw(), v.data(), v.size() * 4) == 0);
}

TEST_CASE("flat bf16 rounding, bf16 sums, ring hops and widening on cuda:0 equal the CPU bits") {
  Stream gpu(cuda_device(0), "cuda:0 compute");
  Stream cpu(cpu_device(0), "cpu:0 compute");
  for (int64_t n : {1, 255, 257, 1000003}) {
    CAPTURE(n);
    std::vector<float> src(n), acc(n);
    for (int64_t i = 0; i < n; ++i) {
      src[i] =
          std::ldexp(1.0f + static_cast<float>(i % 977) / 977.0f, static_cast<int>(i % 40) - 20);
      if (i % 2) src[i] = -src[i];
      if (i % 7 == 3) src[i] = bf16_to_float(float_to_bf16(src[i])) * (1.0f + 1.0f / 256);  // a tie
      acc[i] = static_cast<float>(i % 7) - 3.0f;
    }
    src[0] = std::numeric_limits<float>::quiet_NaN();
    // The same calls on both devices; every result compared bit for bit.
    auto run = [&](Stream& s, Device d) {
      Tensor t_src = tensor_from_vector(s, src, {n}, DType::f32, d);
      Tensor t_acc = tensor_from_vector(s, acc, {n}, DType::f32, d);
      Tensor t_b16 = Tensor::empty({n}, DType::bf16, d);
      Tensor t_hop = Tensor::empty({n}, DType::bf16, d);
      Tensor t_wide = Tensor::empty({n}, DType::f32, d);
      flat_round_bf16(s, t_b16, t_src);
      flat_round_bf16(s, t_hop, t_acc);
      flat_add(s, t_acc, t_b16);             // fp32 += widened bf16
      flat_add_round_bf16(s, t_hop, t_src);  // round(hop + round(src))
      flat_add_round_bf16(s, t_hop, t_b16);
      flat_widen_bf16(s, t_wide, t_hop);
      return std::make_tuple(
          tensor_to_vector<uint16_t>(s, t_b16), tensor_to_vector<uint32_t>(s, t_acc),
          tensor_to_vector<uint16_t>(s, t_hop), tensor_to_vector<uint32_t>(s, t_wide));
    };
    auto [b16_c, acc_c, hop_c, wide_c] = run(cpu, cpu_device(0));
    auto [b16_g, acc_g, hop_g, wide_g] = run(gpu, cuda_device(0));
    const auto all = static_cast<size_t>(n);
    CHECK(first_difference(b16_g, b16_c) == all);
    CHECK(first_difference(acc_g, acc_c) == all);
    CHECK(first_difference(hop_g, hop_c) == all);
    CHECK(first_difference(wide_g, wide_c) == all);
    CHECK(std::isnan(bf16_to_float(b16_g[0])));
  }
}
