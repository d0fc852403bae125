#pragma once
// CUDA launchers behind ops/cross_entropy.h (cross_entropy.cu), queued on a
// cudaStream_t passed as void*. Same semantics as ops/cpu/cross_entropy.h except
// for bad targets: a kernel cannot throw, so a target outside [0, V) that is not
// ignore_index makes the row's loss NaN (forward; the row is still counted) and
// its gradient row NaN (backward). The trainer checks token ids on the host.

#include <cstdint>

namespace fanout::ops::cuda {

// stats (2) = {loss sum, counted rows}, overwritten; deterministic (fixed-order sums).
void cross_entropy_forward_f32(void* stream, float* stats, const float* logits,
                               const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index);

// dlogits (N, V) overwritten; dlogits may equal logits.
void cross_entropy_backward_f32(void* stream, float* dlogits, const float* logits,
                                const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index,
                                float normalizer);

}  // namespace fanout::ops::cuda
