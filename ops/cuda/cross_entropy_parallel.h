#pragma once
// CUDA launchers behind ops/cross_entropy_parallel.h (cross_entropy_parallel.cu),
// queued on a cudaStream_t passed as void*. Same semantics as the CPU twins in
// ops/cpu/cross_entropy_parallel.h except for bad targets: a kernel cannot throw,
// so a target outside [0, V) that is not ignore_index makes the row's target logit
// NaN in every shard's part (so its combined loss is NaN; the row is still counted),
// and a negative one the row's gradient NaN. The trainer checks token ids on the host.

#include <cstdint>

namespace fanout::ops::cuda {

// part (N*3) overwritten: {max, sum of exp(x - max), target logit or 0} per row.
void cross_entropy_shard_forward(void* stream, float* part, const float* logits,
                                 const int32_t* targets, int64_t N, int64_t cols, int64_t ld,
                                 int64_t v0, int64_t V, int32_t ignore_index);

// stats (2) and lse (N) overwritten from parts (S*N*3); deterministic (fixed-order sums).
void cross_entropy_shard_combine(void* stream, float* stats, float* lse, const float* parts,
                                 const int32_t* targets, int64_t N, int64_t S,
                                 int32_t ignore_index);

// dlogits (N rows of ld) overwritten; dlogits may equal logits.
void cross_entropy_shard_backward_f32(void* stream, float* dlogits, const float* logits,
                                      const float* lse, const int32_t* targets, int64_t N,
                                      int64_t cols, int64_t ld, int64_t v0, int32_t ignore_index,
                                      float normalizer);

// The same gradient, rounded once to bf16 into a separate dlogits.
void cross_entropy_shard_backward_f32_to_bf16(void* stream, uint16_t* dlogits, const float* logits,
                                              const float* lse, const int32_t* targets, int64_t N,
                                              int64_t cols, int64_t ld, int64_t v0,
                                              int32_t ignore_index, float normalizer);

}  // namespace fanout::ops::cuda
