#pragma once
// CPU matmul (see ops/matmul.h). float and bf16 go through oneDNN (matmul_dnnl.h,
// chosen over OpenBLAS by measurement: about 2x its GFLOP/s in fp32 on AVX-512);
// double through OpenBLAS dgemm, so the tests run the same arithmetic in double
// against finite differences and use it as the oracle for the fast paths.

#include <cstdint>
#include <string>

#include "engine/core/dtype.h"
#include "ops/cpu/bf16.h"

namespace fanout::ops::cpu {

// out (N, OC) = inp (N, C) weight (OC, C)^T, out's rows ld_out apart (0: OC; the
// columns between are not written). (Out, In): (double, double), (float, float),
// (float, bf16), (bf16, bf16); bf16 inputs accumulate in fp32 and round once at
// the store.
template <typename Out, typename In>
void matmul_forward(Out* out, const In* inp, const In* weight, int64_t N, int64_t C, int64_t OC,
                    int64_t ld_out = 0);

// out (N, OC) = residual (N, OC) + inp weight^T, the product in an f32 scratch and
// then added element by element: the bits of matmul_forward then residual_forward.
// out may alias residual. In: float, bf16.
template <typename In>
void matmul_forward_residual(float* out, const float* residual, const In* inp, const In* weight,
                             int64_t N, int64_t C, int64_t OC);

// dinp (N, C) += dout weight (dinp_add false: =), dweight (OC, C) += dout^T inp;
// dinp or dweight may be nullptr (skipped); dout's rows ld_dout apart (0: OC).
// (Grad, In): (double, double), (float, float), (float, bf16).
template <typename Grad, typename In>
void matmul_backward(Grad* dinp, Grad* dweight, const In* dout, const In* inp, const In* weight,
                     int64_t N, int64_t C, int64_t OC, int64_t ld_dout = 0, bool dinp_add = true);

// Rows [row0, row0 + rows) of dweight alone: dweight_rows (rows, C) +=
// dout[:, row0 : row0 + rows]^T inp, dout (N, OC; rows ld_dout apart) read in place.
template <typename Grad, typename In>
void matmul_backward_weight_rows(Grad* dweight_rows, const In* dout, const In* inp, int64_t N,
                                 int64_t C, int64_t OC, int64_t row0, int64_t rows,
                                 int64_t ld_dout = 0);

// What runs the GEMMs of inputs of dtype `in` on this CPU, for `fanout bench ops`:
// e.g. "oneDNN bf16 (avx512_core_bf16)" or, on a CPU without bf16 instructions,
// "bf16 widened to fp32, oneDNN fp32 (avx2)".
std::string matmul_engine(DType in);

// Whether bf16 GEMMs run natively in oneDNN (true) or on fp32 copies of their
// inputs (false: no AVX512-BF16/AMX, or capped by ONEDNN_MAX_CPU_ISA).
bool matmul_bf16_native();

}  // namespace fanout::ops::cpu
