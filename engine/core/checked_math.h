#pragma once
// Checked arithmetic for every size computed from user input (flags, config.json,
// safetensors and .bin headers): a product or sum that leaves int64 is refused as
// a fanout::Error naming what was being computed, before anything is allocated.
// Use these instead of plain `*` and `+` wherever an operand came from outside.

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string_view>

namespace fanout {

namespace detail {
[[noreturn]] void throw_size_overflow(std::string_view what, std::initializer_list<int64_t> terms,
                                      char op);
}  // namespace detail

// a * b * ...; every factor must be non-negative.
inline int64_t size_mul(std::string_view what, std::initializer_list<int64_t> factors) {
  int64_t out = 1;
  for (int64_t f : factors) {
    if (f < 0 || __builtin_mul_overflow(out, f, &out))
      detail::throw_size_overflow(what, factors, 'x');
  }
  return out;
}

// a + b + ...; every term must be non-negative.
inline int64_t size_add(std::string_view what, std::initializer_list<int64_t> terms) {
  int64_t out = 0;
  for (int64_t t : terms) {
    if (t < 0 || __builtin_add_overflow(out, t, &out))
      detail::throw_size_overflow(what, terms, '+');
  }
  return out;
}

// A finite double converted to int64 only when it fits (a cast would be undefined).
inline bool double_fits_int64(double v) {
  return v == v && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
}

}  // namespace fanout
