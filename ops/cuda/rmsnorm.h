#pragma once
// CUDA launchers behind ops/rmsnorm.h (rmsnorm.cu), queued on a cudaStream_t
// passed as void*. Same semantics as ops/cpu/rmsnorm.h: statistics in double,
// rstd saved by forward, dinp and dweight accumulated by backward.

#include <cstdint>

namespace fanout::ops::cuda {

// out (N, C) = inp * rstd * weight (C); rstd (N) overwritten.
void rmsnorm_forward_f32(void* stream, float* out, float* rstd, const float* inp,
                         const float* weight, int64_t N, int64_t C, float eps);

// dinp (N, C) += d/dinp, dweight (C) += d/dweight; deterministic (no atomics).
void rmsnorm_backward_f32(void* stream, float* dinp, float* dweight, const float* dout,
                          const float* inp, const float* weight, const float* rstd, int64_t N,
                          int64_t C);

}  // namespace fanout::ops::cuda
