#pragma once
// CPU fp32 <-> bf16 casts (see ops/cast.h): the scalar conversions of
// engine/core/dtype.h applied element-wise (bit for bit; vectorised for AVX-512 and
// AVX2). bf16 values are raw uint16_t bits.

#include <cstdint>

namespace fanout::ops::cpu {

void cast_f32_to_bf16(uint16_t* dst, const float* src, int64_t n);
// The same on the calling thread alone, for kernels that round a chunk they just
// wrote (adamw's working copy).
void cast_f32_to_bf16_serial(uint16_t* dst, const float* src, int64_t n);

void cast_bf16_to_f32(float* dst, const uint16_t* src, int64_t n);

}  // namespace fanout::ops::cpu
