#pragma once
// CUDA launchers behind ops/residual.h (residual.cu), queued on a cudaStream_t
// passed as void*. Same semantics and aliasing rules as ops/cpu/residual.h.

#include <cstdint>

namespace fanout::ops::cuda {

// out = a + b; out may alias a or b.
void residual_forward_f32(void* stream, float* out, const float* a, const float* b, int64_t n);

// da += dout, db += dout; da == db gets dout twice.
void residual_backward_f32(void* stream, float* da, float* db, const float* dout, int64_t n);

}  // namespace fanout::ops::cuda
