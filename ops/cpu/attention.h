#pragma once
// CPU causal GQA attention (see ops/attention.h), templated on the scalar so the
// tests can run it in double against finite differences. Instantiated for float,
// double. Per (batch, head) panels of CBLAS GEMMs in the scalar type on strided head
// views (Note [Attention as panels of GEMMs]); softmax row sums accumulate in double.

#include <cstdint>

namespace fanout::ops::cpu {

// out (B, Tq, H, D), lse (B, H, Tq) from q (B, Tq, H, D), k, v (B, Tk, KV, D).
template <typename Real>
void attention_forward(Real* out, Real* lse, const Real* q, const Real* k, const Real* v, int64_t B,
                       int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D);

// dq (B, T, H, D), dk, dv (B, T, KV, D), all overwritten.
template <typename Real>
void attention_backward(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q,
                        const Real* k, const Real* v, const Real* out, const Real* lse, int64_t B,
                        int64_t T, int64_t H, int64_t KV, int64_t D);

}  // namespace fanout::ops::cpu
