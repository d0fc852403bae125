#pragma once
// CUDA launchers behind flat.h (flat_cuda.cu), queued on a cudaStream_t passed
// as void*. Call flat_fill / flat_add / flat_scale instead.

#include <cstdint>

namespace fanout::cuda {

void flat_fill_f32(void* stream, float* dst, int64_t n, float value);
void flat_add_f32(void* stream, float* dst, const float* src, int64_t n);
void flat_scale_f32(void* stream, float* dst, int64_t n, float alpha);

}  // namespace fanout::cuda
