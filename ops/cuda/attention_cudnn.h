#pragma once
// cuDNN's fused causal GQA attention (bf16 q, k, v, out and gradients, f32 lse)
// behind ops/attention.h, queued on a cudaStream_t passed as void*; Tq == Tk only.
// A call that cuDNN refuses returns false after printing one line (once per shape
// and direction) and the caller runs the exact kernel. Declared in every CUDA
// build; defined in builds with FANOUT_HAS_CUDNN (attention_cudnn.cu).

#include <cstdint>
#include <string>

namespace fanout::ops::cuda {

// cudnnGetVersion() answered and a handle could be made on the current device;
// asked once per process.
bool attention_cudnn_loads();

// cudnnGetVersion() of the library loaded (0 when it does not load).
int64_t attention_cudnn_version();

// Problems (shape and direction) cuDNN refused so far in this process.
int64_t attention_cudnn_refusals();

// out (B, T, H, D), lse (B, H, T) from q (B, T, H, D), k, v (B, T, KV, D); bf16
// as raw bits. false: refused, nothing written that the exact kernel won't overwrite.
bool attention_cudnn_forward(void* stream, uint16_t* out, float* lse, const uint16_t* q,
                             const uint16_t* k, const uint16_t* v, int64_t B, int64_t T, int64_t H,
                             int64_t KV, int64_t D);

// dq (B, T, H, D), dk, dv (B, T, KV, D) overwritten; dout bf16 (dout_bf16) or f32
// (cast to a bf16 scratch first). false: refused.
bool attention_cudnn_backward(void* stream, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                              const void* dout, bool dout_bf16, const uint16_t* q,
                              const uint16_t* k, const uint16_t* v, const uint16_t* out,
                              const float* lse, int64_t B, int64_t T, int64_t H, int64_t KV,
                              int64_t D);

}  // namespace fanout::ops::cuda
