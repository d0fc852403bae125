#pragma once
// CUDA launchers behind ops/attention.h (attention.cu), queued on a cudaStream_t
// passed as void*. Same semantics as ops/cpu/attention.h (causal GQA, scale
// D^-0.5, query i at absolute position Tk - Tq + i, lse saved for backward).
// Head dims up to 256.

#include <cstdint>

namespace fanout::ops::cuda {

// out (B, Tq, H, D), lse (B, H, Tq) overwritten, from q (B, Tq, H, D), k, v
// (B, Tk, KV, D); Tk >= Tq.
void attention_forward_f32(void* stream, float* out, float* lse, const float* q, const float* k,
                           const float* v, int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV,
                           int64_t D);

// dq (B, T, H, D), dk, dv (B, T, KV, D) overwritten; deterministic (no atomics).
void attention_backward_f32(void* stream, float* dq, float* dk, float* dv, const float* dout,
                            const float* q, const float* k, const float* v, const float* out,
                            const float* lse, int64_t B, int64_t T, int64_t H, int64_t KV,
                            int64_t D);

}  // namespace fanout::ops::cuda
