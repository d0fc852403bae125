#pragma once
// CPU reference cross-entropy with a fused softmax (see ops/cross_entropy.h),
// templated on the scalar so the tests can run it in double against finite
// differences. Instantiated for float, double. Targets are i32 in every case.
// The backward may also write float logits' gradient as bf16 (ops/cpu/bf16.h): the
// f32 result rounded once.

#include <cstdint>

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

}  // namespace fanout::ops::cpu
