#pragma once
// CPU reference RMSNorm (see ops/rmsnorm.h). T is the type of the input, rstd and
// the gradients, and the compute type: float, or double for the finite-difference
// tests. The weight and the forward output may be stored as bf16 (ops/cpu/bf16.h):
// they are loaded into T, and the output is rounded once at the store.
// Instantiated for T = float with Out, W in {float, bf16}, and T = Out = W = double.

#include <cstdint>

namespace fanout::ops::cpu {

// out (N, C) = rmsnorm(inp) * weight; rstd (N).
template <typename T, typename Out = T, typename W = T>
void rmsnorm_forward(Out* out, T* rstd, const T* inp, const W* weight, int64_t N, int64_t C, T eps);

// dinp (N, C) += ..., dweight (C) += ..., from dout (N, C).
template <typename T, typename W = T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const W* weight,
                      const T* rstd, int64_t N, int64_t C);

}  // namespace fanout::ops::cpu
