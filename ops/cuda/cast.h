#pragma once
// CUDA launchers behind ops/cast.h (cast.cu), queued on a cudaStream_t passed as
// void*. bf16 values are raw uint16_t bits; the results are bit-identical to
// engine/core/dtype.h's scalar conversions.

#include <cstdint>

namespace fanout::ops::cuda {

void cast_f32_to_bf16(void* stream, uint16_t* dst, const float* src, int64_t n);

void cast_bf16_to_f32(void* stream, float* dst, const uint16_t* src, int64_t n);

}  // namespace fanout::ops::cuda
