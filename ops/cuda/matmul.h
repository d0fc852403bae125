#pragma once
// CUDA launchers behind ops/matmul.h (matmul.cu), queued on a cudaStream_t passed
// as void*: fp32 cuBLAS GEMMs (no TF32), one cuBLAS handle per (device, stream).

#include <cstdint>

namespace fanout::ops::cuda {

// out (N, OC) = inp (N, C) weight (OC, C)^T; out is overwritten.
void matmul_forward_f32(void* stream, float* out, const float* inp, const float* weight, int64_t N,
                        int64_t C, int64_t OC);

// dinp (N, C) += dout weight (skipped when dinp is nullptr), dweight (OC, C) +=
// dout^T inp, from dout (N, OC).
// dweight_rows (rows, C) += dout[:, row0 : row0 + rows]^T inp (dout (N, OC)).
void matmul_backward_weight_rows_f32(void* stream, float* dweight_rows, const float* dout,
                                     const float* inp, int64_t N, int64_t C, int64_t OC,
                                     int64_t row0, int64_t rows);
void matmul_backward_f32(void* stream, float* dinp, float* dweight, const float* dout,
                         const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC);

}  // namespace fanout::ops::cuda
