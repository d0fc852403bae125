#include "ops/cpu/matmul.h"

#include <algorithm>
#include <limits>
#include <mutex>

#include <cblas.h>

#include "engine/core/check.h"

namespace fanout::ops::cpu {

namespace {

// Every CPU device runs its ops on its own stream thread; an OpenBLAS pool on top
// would oversubscribe the cores N-fold. The setting is process-wide, so once.
void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

blasint blas_dim(int64_t d) {
  FANOUT_CHECK(d >= 0 && d <= std::numeric_limits<blasint>::max(), "matmul: dimension ", d,
               " does not fit the BLAS integer type");
  return static_cast<blasint>(d);
}

// C (M, Nc) = alpha op(A) op(B) + beta C, row-major, with ld = row length of each
// operand as stored. One overload per scalar keeps the kernels below generic.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t Nc, int64_t K, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* Cm, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, blas_dim(M), blas_dim(Nc), blas_dim(K), 1.0f, A,
              blas_dim(std::max<int64_t>(lda, 1)), B, blas_dim(std::max<int64_t>(ldb, 1)), beta, Cm,
              blas_dim(std::max<int64_t>(ldc, 1)));
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t Nc, int64_t K, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* Cm, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, blas_dim(M), blas_dim(Nc), blas_dim(K), 1.0, A,
              blas_dim(std::max<int64_t>(lda, 1)), B, blas_dim(std::max<int64_t>(ldb, 1)), beta, Cm,
              blas_dim(std::max<int64_t>(ldc, 1)));
}

}  // namespace

// ---------------------------------------------------------------------------

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, int64_t N, int64_t C, int64_t OC) {
  blas_single_threaded();
  if (N == 0 || OC == 0) return;
  // out (N, OC) = inp (N, C) . weight (OC, C)^T
  gemm(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, T{0}, out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t C, int64_t OC) {
  blas_single_threaded();
  if (C == 0) return;
  // dinp (N, C) += dout (N, OC) . weight (OC, C)
  if (dinp != nullptr && N > 0)
    gemm(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, T{1}, dinp, C);
  // dweight (OC, C) += dout (N, OC)^T . inp (N, C)
  if (OC > 0) gemm(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, T{1}, dweight, C);
}

template void matmul_forward<float>(float*, const float*, const float*, int64_t, int64_t, int64_t);
template void matmul_forward<double>(double*, const double*, const double*, int64_t, int64_t,
                                     int64_t);
template void matmul_backward<float>(float*, float*, const float*, const float*, const float*,
                                     int64_t, int64_t, int64_t);
template void matmul_backward<double>(double*, double*, const double*, const double*, const double*,
                                      int64_t, int64_t, int64_t);

}  // namespace fanout::ops::cpu
