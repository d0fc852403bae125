#pragma once
// CUDA launchers behind ops/matmul.h (matmul.cu), queued on a cudaStream_t passed
// as void*. `in` is the dtype of inp, weight and dout: f32 runs cublasSgemm (no
// TF32), bf16 cuBLASLt with fp32 accumulation (ops/cuda/gemm_cublas.h). Gradients
// are f32; out is f32, or bf16 for bf16 inputs.

#include <cstdint>

#include "engine/core/dtype.h"

namespace fanout::ops::cuda {

// out (N, OC; rows ld_out apart) = inp (N, C) weight (OC, C)^T; overwritten.
void matmul_forward(void* stream, void* out, DType out_dtype, const void* inp, const void* weight,
                    DType in, int64_t N, int64_t C, int64_t OC, int64_t ld_out);

// out (N, OC) f32 = residual (N, OC) f32 + inp weight^T; out may be residual.
void matmul_forward_residual(void* stream, float* out, const float* residual, const void* inp,
                             const void* weight, DType in, int64_t N, int64_t C, int64_t OC);

// dinp (N, C) += dout weight (dinp_add false: =, beta 0; skipped when dinp is
// nullptr), dweight (OC, C) += dout^T inp (skipped when nullptr), from dout (N,
// OC; rows ld_dout apart).
void matmul_backward(void* stream, float* dinp, float* dweight, const void* dout, const void* inp,
                     const void* weight, DType in, int64_t N, int64_t C, int64_t OC,
                     int64_t ld_dout, bool dinp_add);

// dweight_rows (rows, C) += dout[:, row0 : row0 + rows]^T inp (dout rows ld_dout apart).
void matmul_backward_weight_rows(void* stream, float* dweight_rows, const void* dout,
                                 const void* inp, DType in, int64_t N, int64_t C, int64_t row0,
                                 int64_t rows, int64_t ld_dout);

}  // namespace fanout::ops::cuda
