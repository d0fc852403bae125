#pragma once
// CPU reference sum of squares for the global gradient norm (see ops/grad_norm.h),
// templated on the scalar. Instantiated for float, double.

#include <cstdint>

namespace fanout::ops::cpu {

// out[0] = sum_i buf[i]^2, in double; the same bits for any thread count.
template <typename T>
void norm_squared(T* out, const T* buf, int64_t n);

}  // namespace fanout::ops::cpu
