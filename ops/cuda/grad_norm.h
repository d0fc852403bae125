#pragma once
// CUDA launcher behind ops/grad_norm.h's norm_squared (grad_norm.cu), queued on a
// cudaStream_t passed as void*.

#include <cstdint>

namespace fanout::ops::cuda {

// out[0] = sum_i buf[i]^2 accumulated in double, Inf past float's range; the
// same bits on every run for a given n (a fixed two-pass reduction).
void norm_squared_f32(void* stream, float* out, const float* buf, int64_t n);

}  // namespace fanout::ops::cuda
