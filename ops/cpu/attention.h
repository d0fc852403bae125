#pragma once
// CPU causal GQA attention (see ops/attention.h). The kernel the ops run is the
// tiled one (Note [Tiled causal attention]): online softmax over key blocks, the
// masked blocks skipped, fp32 math on float or bf16 storage. The GEMM-panel
// reference in float or double (ops/cpu/attention_gemm.cpp) is the tests' oracle
// and runs the double-precision finite-difference checks.

#include <cstdint>

namespace fanout::ops::cpu {

// out (B, Tq, H, D), lse (B, H, Tq) from q (B, Tq, H, D), k, v (B, Tk, KV, D).
// Storage X is float or bf16; lse is always fp32.
template <typename X>
void attention_forward_tiled(X* out, float* lse, const X* q, const X* k, const X* v, int64_t B,
                             int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D);

// dq (B, T, H, D), dk, dv (B, T, KV, D), all overwritten, from dout (B, T, H, D) of
// storage G (float or bf16) and q, k, v, out of storage X.
template <typename X, typename G>
void attention_backward_tiled(X* dq, X* dk, X* dv, const G* dout, const X* q, const X* k,
                              const X* v, const X* out, const float* lse, int64_t B, int64_t T,
                              int64_t H, int64_t KV, int64_t D);

// bf16 storage on AVX512-BF16 (Note [bf16 dot attention], attention_bf16dot.cpp):
// the *_tiled functions with X = bf16 run these when attention_bf16_dot_enabled().
// It starts true where the CPU supports it, unless FANOUT_NO_BF16_DOT=1 is set;
// set_attention_bf16_dot (for tests and benchmarks) switches it, never on where the
// CPU lacks it, and returns the previous setting.
bool attention_bf16_dot_supported();
bool attention_bf16_dot_enabled();
bool set_attention_bf16_dot(bool on);

struct bf16;
void attention_forward_bf16dot(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                               int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D);
template <typename G>
void attention_backward_bf16dot(bf16* dq, bf16* dk, bf16* dv, const G* dout, const bf16* q,
                                const bf16* k, const bf16* v, const bf16* out, const float* lse,
                                int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D);

// The reference: per (batch, head) panels of CBLAS GEMMs in Real (float, double).
template <typename Real>
void attention_forward_gemm(Real* out, Real* lse, const Real* q, const Real* k, const Real* v,
                            int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D);

template <typename Real>
void attention_backward_gemm(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q,
                             const Real* k, const Real* v, const Real* out, const Real* lse,
                             int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D);

}  // namespace fanout::ops::cpu
