#pragma once
// exp and sigmoid for float written for the vectoriser. A libm call per element
// costs more than the GEMMs around it in attention and SwiGLU, so float uses
// Cephes' expf: x = n ln2 + r with |r| <= ln2/2, exp(r) by a polynomial, 2^n built
// in the exponent bits; within 2 ulp for x <= 88. Below -86.5 it gives 0, which
// keeps 2^n a normal number; NaN stays NaN. The selects are integer masks, since
// float selects stop the vectoriser. Double callers keep std::exp (the tests'
// double-precision references rely on it).

#include <bit>
#include <cmath>
#include <cstdint>

// Loops over floats built three times, for AVX-512, AVX2 and the x86-64 baseline;
// the loader picks the best the CPU has (GCC function multiversioning). The
// project compiles for the baseline, so without this they would use 4-wide SSE.
// Sanitizer builds define FANOUT_NO_TARGET_CLONES: the clones' ifunc resolvers
// run during relocation, before the sanitizer runtime starts, and GCC
// instruments them (ThreadSanitizer then segfaults at load).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(FANOUT_NO_TARGET_CLONES)
#define FANOUT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FANOUT_VECTOR_CLONES
#endif

namespace fanout::ops::cpu {

inline float exp_vec(float x) {
  constexpr float kMin = -86.5f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln2 = hi + lo
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const int32_t keep = x < kMin ? 0 : -1;
  const float xc = std::bit_cast<float>((std::bit_cast<int32_t>(x) & keep) |
                                        (std::bit_cast<int32_t>(kMin) & ~keep));
  const float t = xc * kLog2e + kRound;
  const float fn = t - kRound;  // round(xc / ln2)
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float r = (xc - fn * kLn2Hi) - fn * kLn2Lo;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  return y * std::bit_cast<float>(((ni + 127) << 23) & keep);  // y 2^n, or 0
}

// 1 / (1 + exp(-x)) without overflow: exp only ever sees -|x| <= 0.
inline float sigmoid_vec(float x) {
  const float e = exp_vec(-std::fabs(x));
  const float r = 1.0f / (1.0f + e);
  const int32_t pos = x >= 0.0f ? -1 : 0;  // r for x >= 0, else e / (1 + e)
  return std::bit_cast<float>((std::bit_cast<int32_t>(r) & pos) |
                              (std::bit_cast<int32_t>(e * r) & ~pos));
}

}  // namespace fanout::ops::cpu
