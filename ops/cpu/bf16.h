#pragma once
// bf16 as a storage type for the CPU kernels: `bf16` wraps the raw bits so that a
// kernel templated on its storage types (float, double, bf16) reads every element
// through load() into its compute type and writes through store(), with the one
// round-to-nearest-even rule of engine/core/dtype.h. Math is never done in bf16.

#include <bit>
#include <cstdint>

#include "engine/core/dtype.h"

// FANOUT_VECTOR_CLONES (vec_exp.h) for loops that load or store bf16: the AVX-512
// clone is x86-64-v4, whose BW/VL word ops widen and narrow 16 lanes at a time
// (vpmovzxwd, vpmovdw). Built for avx512f alone, GCC falls back to 256-bit vectors
// with pack/permute pairs, about 3x slower per element. Same sanitizer caveat as
// FANOUT_VECTOR_CLONES.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(FANOUT_NO_TARGET_CLONES)
#define FANOUT_BF16_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define FANOUT_BF16_CLONES
#endif

namespace fanout::ops::cpu {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2);

inline float load(bf16 x) {
  return bf16_to_float(x.bits);
}
inline float load(float x) {
  return x;
}
inline double load(double x) {
  return x;
}

// float_to_bf16 (engine/core/dtype.h) bit for bit, without a branch, for the loops
// that store bf16 (store() below, the casts): the NaN case is an integer mask
// select, and the select and the rounding stay in 32-bit lanes, narrowed once at the
// end (narrowing first costs AVX2 a pack and a permute per select). RNE: adding
// 0x7fff plus the lowest kept bit carries into bit 16 exactly when the dropped half
// is above a tie, or a tie with an odd kept part; a finite value that rounds past
// the largest bf16 carries into the exponent and becomes inf, as it should.
inline uint16_t float_to_bf16_branchless(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  const uint32_t quiet = u | 0x00400000u;  // NaN: set the quiet bit, keep sign and payload
  const uint32_t nan = static_cast<int32_t>(u & 0x7fffffffu) > 0x7f800000 ? ~0u : 0u;
  return static_cast<uint16_t>(((quiet & nan) | (rounded & ~nan)) >> 16);
}

// dst = v, rounded to dst's type (bf16: float_to_bf16, without its branch).
inline void store(bf16& dst, float v) {
  dst.bits = float_to_bf16_branchless(v);
}
inline void store(float& dst, float v) {
  dst = v;
}
inline void store(float& dst, double v) {
  dst = static_cast<float>(v);
}
inline void store(double& dst, double v) {
  dst = v;
}

// The storage type of a DType, for dispatchers: storage_of<DType::bf16> is bf16.
template <DType D>
struct StorageOf;
template <>
struct StorageOf<DType::f32> {
  using type = float;
};
template <>
struct StorageOf<DType::bf16> {
  using type = bf16;
};

}  // namespace fanout::ops::cpu
