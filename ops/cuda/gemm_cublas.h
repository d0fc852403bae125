#pragma once
// The cuBLAS GEMMs behind ops/cuda/matmul.cu, each one column-major GEMM as
// ops/gemm_plan.h maps it: f32 through cublasSgemm (fp32 math, no TF32); bf16
// inputs through cuBLASLt with a cached plan per shape, falling back to
// cublasGemmEx where Lt has no algorithm (Note [cuBLASLt plans] in gemm_cublas.cu).
// The calling thread must be bound to the stream's device (BoundStream).

#include <cstdint>

#include "engine/core/dtype.h"
#include "ops/gemm_plan.h"

namespace fanout::ops::cuda {

// D (m, n) = op(A) op(B) + beta C, all f32, on `stream` (a cudaStream_t); C may be D,
// and is not read when beta is 0. Columns between m and ldc of D are never written.
void gemm_f32(void* stream, const ColMajorGemm& g, const float* A, const float* B, float beta,
              const float* C, float* D);

// D (m, n) = op(A) op(B) + beta C, A and B bf16, products accumulated in fp32. C and D
// have dtype cd (f32 or bf16) and g's layout; C may be D, and is not read when beta
// is 0. Columns between m and ldc of D are never written.
void gemm_bf16(void* stream, const ColMajorGemm& g, const void* A, const void* B, float beta,
               const void* C, void* D, DType cd);

}  // namespace fanout::ops::cuda
