#pragma once
// Element types of tensors and the scalar fp32 <-> bf16 conversions
// (round-to-nearest-even, NaN kept quiet) that every backend agrees on.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace fanout {

enum class DType { f32, bf16, i32, i64, u16 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", ...

inline float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  }
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

}  // namespace fanout
