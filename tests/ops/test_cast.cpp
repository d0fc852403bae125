// fp32 <-> bf16 casts, compared bit for bit: every bf16 value round-trips, fp32
// rounds to the nearest bf16 with ties to even (against an independent reference
// that measures distances in double), Inf and NaN survive, sizes 1 and odd; the
// vectorised CPU kernels bit for bit against the scalar conversions of dtype.h.

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ops/cast.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/cast.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

Tensor bf16_tensor(Stream& s, const std::vector<uint16_t>& bits) {
  return tensor_from_vector(s, bits, {static_cast<int64_t>(bits.size())}, DType::bf16, s.device());
}

Tensor f32_bits_tensor(Stream& s, const std::vector<uint32_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = std::bit_cast<float>(bits[i]);
  return tensor_from_vector(s, v, {static_cast<int64_t>(v.size())}, DType::f32, s.device());
}

std::vector<uint16_t> to_bf16(Stream& s, const std::vector<uint32_t>& f32_bits) {
  const int64_t n = static_cast<int64_t>(f32_bits.size());
  Tensor dst = Tensor::empty({n}, DType::bf16, s.device());
  ops::cast_f32_to_bf16(s, dst, f32_bits_tensor(s, f32_bits), n);
  return tensor_to_vector<uint16_t>(s, dst);
}

std::vector<uint32_t> to_f32_bits(Stream& s, const std::vector<uint16_t>& bf16_bits) {
  const int64_t n = static_cast<int64_t>(bf16_bits.size());
  Tensor dst = Tensor::empty({n}, DType::f32, s.device());
  ops::cast_bf16_to_f32(s, dst, bf16_tensor(s, bf16_bits), n);
  std::vector<uint32_t> out;
  for (float f : tensor_to_vector<float>(s, dst)) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

// The value of a bf16 pattern in double; the pattern just past the largest finite
// one (Inf) counts as 2^128, where rounding treats it as the next step up.
double bf16_value(uint32_t bits16) {
  double sign = (bits16 & 0x8000u) ? -1.0 : 1.0;
  if ((bits16 & 0x7fffu) == 0x7f80u) return sign * std::ldexp(1.0, 128);
  return std::bit_cast<float>(bits16 << 16);
}

// Nearest bf16 to a finite or infinite (non-NaN) float, ties to the even pattern,
// chosen by comparing the two candidates' distances in double.
uint16_t bf16_nearest_reference(uint32_t f32_bits) {
  if ((f32_bits & 0x7fffffffu) == 0x7f800000u) return static_cast<uint16_t>(f32_bits >> 16);
  double x = std::bit_cast<float>(f32_bits);
  uint32_t lo = f32_bits >> 16, hi = lo + 1;  // truncation, and one step away from zero
  double dlo = std::abs(x - bf16_value(lo)), dhi = std::abs(x - bf16_value(hi));
  if (dlo < dhi) return static_cast<uint16_t>(lo);
  if (dhi < dlo) return static_cast<uint16_t>(hi);
  return static_cast<uint16_t>((lo & 1u) ? hi : lo);
}

bool is_nan_f32(uint32_t bits) {
  return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu);
}
bool is_nan_bf16(uint16_t bits) {
  return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu);
}

}  // namespace

TEST_CASE("cast every bf16 value round-trips through f32 exactly") {
  Stream s(cpu_device(0), "cpu:0 compute");
  std::vector<uint16_t> all(1 << 16);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  auto f32 = to_f32_bits(s, all);
  REQUIRE(f32.size() == all.size());
  for (uint32_t i = 0; i < all.size(); ++i) {
    CAPTURE(i);
    REQUIRE(f32[i] == (i << 16));  // bf16 -> f32 only appends 16 zero bits
  }
  auto back = to_bf16(s, f32);
  int64_t nans = 0;
  for (uint32_t i = 0; i < all.size(); ++i) {
    CAPTURE(i);
    if (is_nan_bf16(all[i])) {
      ++nans;
      CHECK(is_nan_bf16(back[i]));
      CHECK((back[i] & 0x8000u) == (all[i] & 0x8000u));  // sign kept
    } else {
      CHECK(back[i] == all[i]);
    }
  }
  CHECK(nans == 2 * 127);
}

TEST_CASE("cast f32 to bf16 rounds to nearest with ties to even") {
  Stream s(cpu_device(0), "cpu:0 compute");
  struct Case {
    uint32_t f32;
    uint16_t bf16;
  };
  const Case cases[] = {
      {0x3f808000u, 0x3f80u},                          // 1 + 2^-8: a tie, down to the even 0x3f80
      {0x3f818000u, 0x3f82u},                          // a tie, up to the even 0x3f82
      {0x3f808001u, 0x3f81u},                          // just above the tie
      {0x3f807fffu, 0x3f80u},                          // just below the tie
      {0xbf808000u, 0xbf80u},                          // negative tie, to even
      {0xbf818000u, 0xbf82u}, {0x00008000u, 0x0000u},  // subnormal tie, to even zero
      {0x00018000u, 0x0002u},                          // subnormal tie, to even
      {0x80000000u, 0x8000u},                          // -0 keeps its sign
      {0x7f7f8000u, 0x7f80u},  // largest-finite tie rounds to the even pattern: Inf
      {0x7f7f7fffu, 0x7f7fu},  // just below it stays the largest finite bf16
      {0x7f7fffffu, 0x7f80u},  // FLT_MAX overflows to Inf
      {0xff7fffffu, 0xff80u},  // -FLT_MAX to -Inf
  };
  std::vector<uint32_t> in;
  for (const Case& c : cases) in.push_back(c.f32);
  auto out = to_bf16(s, in);
  for (size_t i = 0; i < in.size(); ++i) {
    CAPTURE(i);
    CHECK(out[i] == cases[i].bf16);
    CHECK(out[i] == bf16_nearest_reference(in[i]));  // the reference agrees on the table
  }
}

TEST_CASE("cast f32 to bf16 matches the nearest-even reference on random bit patterns") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t n : {1, 3, 1001, 100001}) {  // 100001: past the parallel grain
    CAPTURE(n);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::vector<uint32_t> in(n);
    for (uint32_t& b : in) {
      do b = rng();
      while (is_nan_f32(b));
    }
    auto out = to_bf16(s, in);
    int64_t changed = 0;
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(out[i] == bf16_nearest_reference(in[i]));
      changed += out[i] != (in[i] >> 16);
    }
    if (n > 100) CHECK(changed > 0);  // some inputs really rounded up
  }
}

TEST_CASE("cast keeps Inf and NaN") {
  Stream s(cpu_device(0), "cpu:0 compute");
  std::vector<uint32_t> in = {0x7f800000u, 0xff800000u,  // +Inf, -Inf
                              0x7fc00000u, 0xffc00000u,  // quiet NaNs
                              0x7f800001u, 0x7fa00000u,  // signalling NaNs: low payload bits
                              0x7fffffffu};              // NaN that would round into the exponent
  auto out = to_bf16(s, in);
  CHECK(out[0] == 0x7f80u);
  CHECK(out[1] == 0xff80u);
  for (size_t i = 2; i < in.size(); ++i) {
    CAPTURE(i);
    CHECK(is_nan_bf16(out[i]));
    CHECK((out[i] & 0x8000u) == ((in[i] >> 16) & 0x8000u));
  }
  auto back = to_f32_bits(s, {0x7f80u, 0xff80u, 0x7fc0u, 0xffc1u});
  CHECK(std::isinf(std::bit_cast<float>(back[0])));
  CHECK(std::isinf(std::bit_cast<float>(back[1])));
  CHECK(std::isnan(std::bit_cast<float>(back[2])));
  CHECK(std::isnan(std::bit_cast<float>(back[3])));
}

TEST_CASE("cast kernels handle size 1 and odd sizes with values not all zero") {
  // The CPU kernels directly, against the scalar conversions of engine/core/dtype.h.
  for (int64_t n : {1, 7, 33, 40001}) {
    CAPTURE(n);
    auto v = random_vector(n, static_cast<uint64_t>(n), -100, 100);
    REQUIRE(max_abs(v) > 0.1);
    std::vector<float> src = cast_vector<float>(v), back(n, -1.0f);
    std::vector<uint16_t> bf(n, 0xffffu);
    ops::cpu::cast_f32_to_bf16(bf.data(), src.data(), n);
    ops::cpu::cast_bf16_to_f32(back.data(), bf.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(bf[i] == float_to_bf16(src[i]));
      REQUIRE(back[i] == bf16_to_float(bf[i]));
      // 8 significant bits: within half a unit in the last place, 2^-9 relative.
      REQUIRE(std::abs(back[i] - src[i]) <= std::ldexp(std::abs(src[i]), -8));
    }
  }
}

TEST_CASE("cast CPU kernels equal the scalar float_to_bf16 on special values and random bits") {
  // The kernels use a branch-free form (float_to_bf16_branchless) built for AVX-512 and
  // AVX2; every result must be the scalar function's, NaN payloads included.
  std::vector<uint32_t> in = {
      0x00000000u, 0x80000000u,                            // +-0
      0x7f800000u, 0xff800000u,                            // +-inf
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,  // quiet and signalling NaNs
      0x7fbfffffu, 0x7fffffffu, 0xffffffffu,               // NaNs with full payloads
      0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu,  // largest finite, its tie
      0x00000001u, 0x80000001u, 0x00008000u, 0x00018000u,  // subnormals and their ties
      0x007fffffu, 0x00800000u, 0x3f808000u, 0x3f818000u,  // subnormal max, min normal, ties
  };
  std::mt19937 rng(7);
  while (in.size() < (1u << 21) + 13) in.push_back(rng());  // odd: a vector tail too
  const int64_t n = static_cast<int64_t>(in.size());
  std::vector<float> src(n);
  for (int64_t i = 0; i < n; ++i) src[i] = std::bit_cast<float>(in[i]);
  std::vector<uint16_t> bf(n);
  ops::cpu::cast_f32_to_bf16(bf.data(), src.data(), n);
  std::vector<float> back(n);
  ops::cpu::cast_bf16_to_f32(back.data(), bf.data(), n);
  int64_t nans = 0;
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CAPTURE(in[i]);
    REQUIRE(bf[i] == float_to_bf16(src[i]));
    REQUIRE(bf[i] == ops::cpu::float_to_bf16_branchless(src[i]));
    REQUIRE(std::bit_cast<uint32_t>(back[i]) == static_cast<uint32_t>(bf[i]) << 16);
    nans += is_nan_f32(in[i]);
  }
  CHECK(nans > 1000);  // random bits include NaNs (~1/256 of them): that path ran
  CHECK(bf[4] == 0x7fc0u);
  CHECK(bf[9] == 0x7fffu);   // a full payload does not carry into the sign
  CHECK(bf[11] == 0x7f80u);  // FLT_MAX rounds up to inf
}
