// CUDA matmul through cublasSgemm. cuBLAS is column-major: a row-major (R, K)
// matrix is the column-major (K, R) matrix with leading dimension K, i.e. its
// transpose, so each row-major product Y = A B is issued as Y^T = B^T A^T:
//   out^T (OC, N)    = W (OC, C)    inp^T (C, N)    -> sgemm(T, N, OC, N, C)
//   dinp^T (C, N)   += W^T (C, OC)  dout^T (OC, N)  -> sgemm(N, N, C, N, OC)
//   dweight^T (C, OC) += inp^T (C, N) dout (N, OC)  -> sgemm(N, T, C, OC, N)

#include <cublas_v2.h>

#include <map>
#include <mutex>
#include <utility>

#include "ops/cuda/common.cuh"
#include "ops/cuda/matmul.h"

#define FANOUT_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                            \
    cublasStatus_t fanout_st_ = (expr);                                                           \
    if (fanout_st_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      int fanout_dev_ = -1;                                                                       \
      cudaGetDevice(&fanout_dev_);                                                                \
      ::fanout::detail::throw_error(::fanout::detail::str_cat(                                    \
          "cuBLAS error on cuda:", fanout_dev_, ": ", cublasGetStatusString(fanout_st_), " in `", \
          #expr, "` at ", __FILE__, ":", __LINE__));                                              \
    }                                                                                             \
  } while (0)

namespace fanout::ops::cuda {

namespace {

// The handle for (current device, stream), created on first use and bound to the
// stream. A handle is not safe to share between threads, a stream is used by
// one thread at a time, so one per stream. Never destroyed: handles outlive
// streams (a new stream at a reused address on the same device simply reuses
// its handle, already bound to that address), and destroying them at exit,
// after the CUDA runtime may have shut down, could crash.
cublasHandle_t cublas_handle(cudaStream_t stream) {
  static std::mutex mu;
  static auto* handles = new std::map<std::pair<int, cudaStream_t>, cublasHandle_t>();
  int device = -1;
  FANOUT_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = handles->try_emplace({device, stream}, nullptr);
  if (inserted) {
    cublasHandle_t h = nullptr;
    try {
      FANOUT_CUBLAS_CHECK(cublasCreate(&h));
      FANOUT_CUBLAS_CHECK(cublasSetStream(h, stream));
      // fp32 arithmetic throughout: no TF32 tensor-core shortcut.
      FANOUT_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
      FANOUT_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    } catch (...) {
      if (h) cublasDestroy(h);
      handles->erase(it);
      throw;
    }
    it->second = h;
  }
  return it->second;
}

}  // namespace

// ---

void matmul_forward_f32(void* stream, float* out, const float* inp, const float* weight, int64_t N,
                        int64_t C, int64_t OC) {
  const char* op = "matmul_forward";
  if (N <= 0 || OC <= 0) return;
  cudaStream_t s = stream_bind(stream);
  if (C <= 0) {  // an empty sum: out = 0 (cuBLAS' k = 0 path is not relied on)
    FANOUT_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * N * OC, s));
    return;
  }
  const int n = checked_int(op, "N", N), c = checked_int(op, "C", C),
            oc = checked_int(op, "OC", OC);
  const float one = 1.0f, zero = 0.0f;
  FANOUT_CUBLAS_CHECK(cublasSgemm(cublas_handle(s), CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, &one,
                                  weight, c, inp, c, &zero, out, oc));
}

void matmul_backward_f32(void* stream, float* dinp, float* dweight, const float* dout,
                         const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC) {
  const char* op = "matmul_backward";
  if (C <= 0) return;
  cudaStream_t s = stream_bind(stream);
  const int n = checked_int(op, "N", N), c = checked_int(op, "C", C),
            oc = checked_int(op, "OC", OC);
  const float one = 1.0f;
  cublasHandle_t h = cublas_handle(s);
  // dinp += dout weight: a sum over OC; nothing to add when OC == 0.
  if (dinp != nullptr && n > 0 && oc > 0)
    FANOUT_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, &one, weight, c, dout,
                                    oc, &one, dinp, c));
  // dweight += dout^T inp: a sum over N; nothing to add when N == 0.
  if (dweight != nullptr && oc > 0 && n > 0)
    FANOUT_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, &one, inp, c, dout, oc,
                                    &one, dweight, c));
}

void matmul_backward_weight_rows_f32(void* stream, float* dweight_rows, const float* dout,
                                     const float* inp, int64_t N, int64_t C, int64_t OC,
                                     int64_t row0, int64_t rows) {
  const char* op = "matmul_backward_weight_rows";
  if (C <= 0 || N <= 0 || rows <= 0) return;
  cudaStream_t s = stream_bind(stream);
  const int n = checked_int(op, "N", N), c = checked_int(op, "C", C),
            r = checked_int(op, "rows", rows), ld = checked_int(op, "OC", OC);
  const float one = 1.0f;
  // Column-major view: dweight_rows^T (C, rows) += inp^T (C, N) . block (N, rows),
  // the block's columns OC apart in dout.
  FANOUT_CUBLAS_CHECK(cublasSgemm(cublas_handle(s), CUBLAS_OP_N, CUBLAS_OP_T, c, r, n, &one, inp, c,
                                  dout + row0, ld, &one, dweight_rows, c));
}

}  // namespace fanout::ops::cuda
