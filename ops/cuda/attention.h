#pragma once
// CUDA launchers behind ops/attention.h (attention.cu), queued on a cudaStream_t
// passed as void*: the exact kernels, f32 or bf16 storage (raw uint16_t bits) with
// fp32 math. Same semantics as ops/cpu/attention.h (causal GQA, scale D^-0.5, query
// i at absolute position Tk - Tq + i, lse saved for backward). Head dims up to 256.
// cuDNN's fused kernels are in attention_cudnn.h.

#include <cstdint>

namespace fanout::ops::cuda {

// out (B, Tq, H, D), lse (B, H, Tq) overwritten, from q (B, Tq, H, D), k, v
// (B, Tk, KV, D); Tk >= Tq. q, k, v, out are bf16 when bf16, else f32.
void attention_forward_exact(void* stream, bool bf16, void* out, float* lse, const void* q,
                             const void* k, const void* v, int64_t B, int64_t Tq, int64_t Tk,
                             int64_t H, int64_t KV, int64_t D);

// dq (B, T, H, D), dk, dv (B, T, KV, D) overwritten; deterministic (no atomics).
// q, k, v, out and dq, dk, dv are bf16 when bf16; dout is bf16 when dout_bf16.
void attention_backward_exact(void* stream, bool bf16, bool dout_bf16, void* dq, void* dk, void* dv,
                              const void* dout, const void* q, const void* k, const void* v,
                              const void* out, const float* lse, int64_t B, int64_t T, int64_t H,
                              int64_t KV, int64_t D);

}  // namespace fanout::ops::cuda
