#pragma once
// CUDA launchers behind ops/rmsnorm.h (rmsnorm.cu), queued on a cudaStream_t
// passed as void*. Same semantics as ops/cpu/rmsnorm.h: statistics in double,
// rstd saved by forward, dinp and dweight accumulated by backward. The weight (W)
// and forward's output (Out) are float (f32) or uint16_t (bf16 bits); the rest f32.

#include <cstdint>

namespace fanout::ops::cuda {

// out (N, C) = inp * rstd * weight (C), rounded once to Out; rstd (N) overwritten.
template <typename Out, typename W>
void rmsnorm_forward(void* stream, Out* out, float* rstd, const float* inp, const W* weight,
                     int64_t N, int64_t C, float eps);

// dinp (N, C) += d/dinp, dweight (C) += d/dweight; deterministic (no atomics).
template <typename W>
void rmsnorm_backward(void* stream, float* dinp, float* dweight, const float* dout,
                      const float* inp, const W* weight, const float* rstd, int64_t N, int64_t C);

}  // namespace fanout::ops::cuda
