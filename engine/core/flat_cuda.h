#pragma once
// CUDA launchers behind flat.h (flat_cuda.cu), queued on a cudaStream_t passed
// as void*. Call the flat_* functions of flat.h instead. bf16 values are raw
// uint16_t bits, rounded as engine/core/dtype.h rounds them.

#include <cstdint>

namespace fanout::cuda {

void flat_fill_f32(void* stream, float* dst, int64_t n, float value);
void flat_add_f32(void* stream, float* dst, const float* src, int64_t n);
void flat_add_bf16_to_f32(void* stream, float* dst, const uint16_t* src, int64_t n);
void flat_round_bf16(void* stream, uint16_t* dst, const float* src, int64_t n);
// dst = round(dst + round(src)); src_bf16 says src holds bf16 bits (else f32).
void flat_add_round_bf16(void* stream, uint16_t* dst, const void* src, bool src_bf16, int64_t n);
void flat_widen_bf16(void* stream, float* dst, const uint16_t* src, int64_t n);
void flat_scale_f32(void* stream, float* dst, int64_t n, float alpha);

}  // namespace fanout::cuda
