#pragma once
// CUDA launchers behind ops/cross_entropy.h (cross_entropy.cu), queued on a
// cudaStream_t passed as void*. Same semantics as ops/cpu/cross_entropy.h except
// for bad targets: a kernel cannot throw, so a target outside [0, V) that is not
// ignore_index makes the row's loss NaN (forward; the row is still counted) and
// its gradient row NaN (backward). The trainer checks token ids on the host.

#include <cstdint>

namespace fanout::ops::cuda {

// stats (2) = {sum of loss (N), rows whose target is not ignore_index}, overwritten,
// in a fixed order (deterministic): the last step of every forward below, and of
// the vocabulary-parallel loss (cross_entropy_parallel.h).
void cross_entropy_sum_rows(void* stream, float* stats, const double* loss, const int32_t* targets,
                            int64_t N, int32_t ignore_index);

// stats (2) = {loss sum, counted rows}, overwritten; deterministic (fixed-order sums).
void cross_entropy_forward_f32(void* stream, float* stats, const float* logits,
                               const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index);

// dlogits (N, V) overwritten; dlogits may equal logits.
void cross_entropy_backward_f32(void* stream, float* dlogits, const float* logits,
                                const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index,
                                float normalizer);

// The same gradient, rounded once to bf16 into a separate dlogits (N, V).
void cross_entropy_backward_f32_to_bf16(void* stream, uint16_t* dlogits, const float* logits,
                                        const int32_t* targets, int64_t N, int64_t V,
                                        int32_t ignore_index, float normalizer);

// Note [Fused classifier] (ops/cross_entropy.h): bf16 logits, rows ld apart.
// stats and lse (N) overwritten; a bad target gives a NaN loss, as above.
void cross_entropy_fused_forward(void* stream, float* stats, float* lse, const uint16_t* logits,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t ld,
                                 int32_t ignore_index);
// logits become their gradient in place (NaN rows for bad targets).
void cross_entropy_fused_backward(void* stream, uint16_t* logits, const float* lse,
                                  const int32_t* targets, int64_t N, int64_t V, int64_t ld,
                                  int32_t ignore_index, float normalizer);

}  // namespace fanout::ops::cuda
