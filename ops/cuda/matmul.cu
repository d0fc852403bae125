// CUDA matmul: each op is one column-major GEMM as ops/gemm_plan.h maps it (Note
// [Row-major ops as column-major GEMMs]), run by ops/cuda/gemm_cublas.h:
// cublasSgemm for f32 inputs, cuBLASLt for bf16.

#include "ops/cuda/matmul.h"

#include "engine/core/check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemm_cublas.h"
#include "ops/gemm_plan.h"

namespace fanout::ops::cuda {

namespace {

// D = op(A) op(B) + beta C for inputs of dtype `in` (f32 inputs: f32 C and D).
void gemm(cudaStream_t s, const ColMajorGemm& g, DType in, const void* A, const void* B, float beta,
          const void* C, void* D, DType cd) {
  if (in == DType::bf16) return gemm_bf16(s, g, A, B, beta, C, D, cd);
  FANOUT_ASSERT(in == DType::f32 && cd == DType::f32, "matmul: ", dtype_name(in), " inputs with ",
                dtype_name(cd), " out");
  gemm_f32(s, g, static_cast<const float*>(A), static_cast<const float*>(B), beta,
           static_cast<const float*>(C), static_cast<float*>(D));
}

}  // namespace

// ---

void matmul_forward(void* stream, void* out, DType out_dtype, const void* inp, const void* weight,
                    DType in, int64_t N, int64_t C, int64_t OC, int64_t ld_out) {
  if (N <= 0 || OC <= 0) return;
  BoundStream s(stream);
  if (C <= 0) {  // an empty sum: out = 0 (cuBLAS' k = 0 path is not relied on)
    const size_t es = dtype_size(out_dtype);
    FANOUT_CUDA_CHECK(cudaMemset2DAsync(out, ld_out * es, 0, OC * es, N, s));
    return;
  }
  // out^T (OC, N) = W (OC, C) inp^T (C, N); out is not read (beta 0).
  gemm(s, gemm_plan_forward(N, C, OC, ld_out), in, weight, inp, 0.0f, out, out, out_dtype);
}

void matmul_forward_residual(void* stream, float* out, const float* residual, const void* inp,
                             const void* weight, DType in, int64_t N, int64_t C, int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  BoundStream s(stream);
  if (C <= 0) {  // out = residual + an empty sum
    if (out != residual) {
      FANOUT_CUDA_CHECK(
          cudaMemcpyAsync(out, residual, sizeof(float) * N * OC, cudaMemcpyDeviceToDevice, s));
    }
    return;
  }
  // One GEMM with beta 1: C = residual, D = out (Lt reads C and writes D in one pass).
  gemm(s, gemm_plan_forward(N, C, OC, OC), in, weight, inp, 1.0f, residual, out, DType::f32);
}

void matmul_backward(void* stream, float* dinp, float* dweight, const void* dout, const void* inp,
                     const void* weight, DType in, int64_t N, int64_t C, int64_t OC,
                     int64_t ld_dout, bool dinp_add) {
  if (C <= 0 || N <= 0) return;  // every product is empty
  BoundStream s(stream);
  if (OC <= 0) {  // an empty sum: dinp = 0 when it is overwritten; every other product adds 0
    if (dinp != nullptr && !dinp_add)
      FANOUT_CUDA_CHECK(cudaMemsetAsync(dinp, 0, sizeof(float) * N * C, s));
    return;
  }
  // dinp^T (C, N) (+)= W^T (C, OC) dout^T (OC, N); beta 0 does not read dinp.
  if (dinp != nullptr) {
    gemm(s, gemm_plan_backward_inp(N, C, OC, ld_dout), in, weight, dout, dinp_add ? 1.0f : 0.0f,
         dinp, dinp, DType::f32);
  }
  // dweight^T (C, OC) += inp^T (C, N) dout (N, OC)
  if (dweight != nullptr) {
    gemm(s, gemm_plan_backward_weight(N, C, 0, OC, ld_dout), in, inp, dout, 1.0f, dweight, dweight,
         DType::f32);
  }
}

void matmul_backward_weight_rows(void* stream, float* dweight_rows, const void* dout,
                                 const void* inp, DType in, int64_t N, int64_t C, int64_t row0,
                                 int64_t rows, int64_t ld_dout) {
  if (C <= 0 || N <= 0 || rows <= 0) return;
  BoundStream s(stream);
  // dweight_rows^T (C, rows) += inp^T (C, N) . block (N, rows), the block's columns
  // ld_dout apart in dout, starting at column row0.
  gemm(s, gemm_plan_backward_weight(N, C, row0, rows, ld_dout), in, inp, dout, 1.0f, dweight_rows,
       dweight_rows, DType::f32);
}

}  // namespace fanout::ops::cuda
