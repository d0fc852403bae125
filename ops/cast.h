#pragma once
// dtype casts between fp32 and bf16 (stored as raw uint16_t bits), element-wise
// over n elements, with the round-to-nearest-even rule of engine/core/dtype.h so
// that every backend produces the same bits. Used for bf16 weights and activations.

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// dst (n) bf16 = round_to_nearest_even(src (n) f32); NaN stays NaN.
void cast_f32_to_bf16(Stream& stream, const Tensor& dst, const Tensor& src, int64_t n);

// dst (n) f32 = src (n) bf16, exact.
void cast_bf16_to_f32(Stream& stream, const Tensor& dst, const Tensor& src, int64_t n);

}  // namespace fanout::ops
