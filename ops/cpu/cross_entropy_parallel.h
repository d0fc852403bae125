#pragma once
// CPU twins of the vocabulary-parallel cross-entropy (ops/cross_entropy_parallel.h,
// Note [Vocabulary-parallel cross-entropy]): f32 logits, rows ld apart, parallel
// over rows. Row max and sum of exponentials in double, as ops/cpu/cross_entropy.cpp
// takes them; the per-row losses summed in double in row order. The backward also
// writes bf16 (ops/cpu/bf16.h): the f32 result rounded once.

#include <cstdint>

#include "ops/cpu/bf16.h"

namespace fanout::ops::cpu {

// part (N*3) = {max, sum of exp(x - max), target logit or 0} per row; {0, 0, 0}
// on ignored rows. Throws fanout::Error on a target outside [0, V) that is not
// ignore_index, before any output is written.
void cross_entropy_shard_forward(float* part, const float* logits, const int32_t* targets,
                                 int64_t N, int64_t cols, int64_t ld, int64_t v0, int64_t V,
                                 int32_t ignore_index);

// stats (2) and lse (N) from the S shards' parts (S*N*3), shard-major.
void cross_entropy_shard_combine(float* stats, float* lse, const float* parts,
                                 const int32_t* targets, int64_t N, int64_t S,
                                 int32_t ignore_index);

// dlogits (N rows of ld) overwritten; a float dlogits may equal logits. Throws on a
// negative target that is not ignore_index, before any output is written.
void cross_entropy_shard_backward(float* dlogits, const float* logits, const float* lse,
                                  const int32_t* targets, int64_t N, int64_t cols, int64_t ld,
                                  int64_t v0, int32_t ignore_index, float normalizer);
void cross_entropy_shard_backward(bf16* dlogits, const float* logits, const float* lse,
                                  const int32_t* targets, int64_t N, int64_t cols, int64_t ld,
                                  int64_t v0, int32_t ignore_index, float normalizer);

}  // namespace fanout::ops::cpu
