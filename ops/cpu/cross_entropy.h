#pragma once
// CPU reference cross-entropy with a fused softmax (see ops/cross_entropy.h),
// templated on the scalar so the tests can run it in double against finite
// differences. Instantiated for float, double. Targets are i32 in every case.
// The backward may also write float logits' gradient as bf16 (ops/cpu/bf16.h): the
// f32 result rounded once.

#include <cstdint>

#include "ops/cpu/bf16.h"

namespace fanout::ops::cpu {

// stats[0] = loss sum, stats[1] = counted rows. Throws fanout::Error on a target
// outside [0, V) that is not ignore_index.
template <typename T>
void cross_entropy_forward(T* stats, const T* logits, const int32_t* targets, int64_t N, int64_t V,
                           int32_t ignore_index);

// Overwrites dlogits; dlogits may equal logits (when D == T). D is T, or bf16 for
// T = float.
template <typename T, typename D = T>
void cross_entropy_backward(D* dlogits, const T* logits, const int32_t* targets, int64_t N,
                            int64_t V, int32_t ignore_index, T normalizer);

// The fused classifier's twin (ops/cross_entropy.h, Note [Fused classifier]):
// bf16 logits, rows ld apart. Forward: stats as above and lse (N) (0 on ignored
// rows); throws on a bad target. Backward: the logits become their gradient in
// place, from lse; columns [V, ld) are not touched.
void cross_entropy_fused_forward(float* stats, float* lse, const bf16* logits,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t ld,
                                 int32_t ignore_index);
void cross_entropy_fused_backward(bf16* logits, const float* lse, const int32_t* targets, int64_t N,
                                  int64_t V, int64_t ld, int32_t ignore_index, float normalizer);

}  // namespace fanout::ops::cpu
