// The reference CPU attention: per (batch, head) panels of CBLAS GEMMs, in float or
// double. The tests run it in double against finite differences and use it as the
// oracle of the tiled kernel (ops/cpu/attention.cpp).

#include "ops/cpu/attention.h"

#include "ops/cpu/parallel.h"

#include "ops/cpu/vec_exp.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include <cblas.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include "engine/core/check.h"

namespace fanout::ops::cpu {

// Note [Attention as panels of GEMMs]
// Per (batch, head) the products are GEMMs on strided views: the rows of head h in a
// (B, T, H, D) tensor are H*D apart, so Q_h, K_h, V_h, O_h are passed to CBLAS with
// that leading dimension and nothing is copied. Query rows go in panels of kPanel;
// a panel ending at query i sees keys [0, Tk - Tq + i], so the GEMMs of a panel stop
// there and skip the masked upper-right of S (half of it for long T). Inside the
// panel's diagonal block the masked scores are zeroed after the softmax. Scores and
// probabilities are in the scalar type, softmax row sums in double.

namespace {

constexpr int64_t kPanel = 32;  // query rows per panel

// Every CPU device runs its ops on its own stream thread; an OpenBLAS pool on top
// would oversubscribe the cores (see ops/cpu/matmul.cpp). Process-wide, so once.
void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

blasint blas_dim(int64_t d) {
  FANOUT_CHECK(d >= 0 && d <= std::numeric_limits<blasint>::max(), "attention: dimension ", d,
               " does not fit the BLAS integer type");
  return static_cast<blasint>(d);
}

// C (M, N) = alpha op(A) op(B) + beta C, row-major, ld = row stride of each operand.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, blas_dim(M), blas_dim(N), blas_dim(K), alpha, A, blas_dim(lda),
              B, blas_dim(ldb), beta, C, blas_dim(ldc));
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, double alpha,
          const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, blas_dim(M), blas_dim(N), blas_dim(K), alpha, A, blas_dim(lda),
              B, blas_dim(ldb), beta, C, blas_dim(ldc));
}

template <typename Real>
double dot_row(const Real* a, const Real* b, int64_t D) {
  double s = 0.0;
  for (int64_t d = 0; d < D; ++d) s += static_cast<double>(a[d]) * b[d];
  return s;
}

// max of p[0:n), n >= 1, with independent lanes so the loop vectorises.
template <typename Real>
Real max_row(const Real* p, int64_t n) {
  constexpr int kLanes = 8;
  Real m[kLanes];
  std::fill(m, m + kLanes, p[0]);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) m[l] = std::max(m[l], p[j + l]);
  for (; j < n; ++j) m[0] = std::max(m[0], p[j]);
  return *std::max_element(m, m + kLanes);
}

// p[0:n) <- exp(p[0:n) - shift), with shift at least max p up to rounding (a row max
// or log-sum-exp). Float goes through exp_vec (vec_exp.h): below -86.5 it gives 0,
// harmless next to a row sum >= 1. Double keeps std::exp, so the tests' formulas hold.
void exp_shifted(float* p, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) p[j] = exp_vec(p[j] - shift);
}

void exp_shifted(double* p, int64_t n, double shift) {
  for (int64_t j = 0; j < n; ++j) p[j] = std::exp(p[j] - shift);
}

// exp_shifted, returning the sum of the results accumulated in double.
template <typename Real>
double exp_shifted_sum(Real* p, int64_t n, Real shift) {
  exp_shifted(p, n, shift);
  constexpr int kLanes = 4;
  double s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) s[l] += p[j + l];
  for (; j < n; ++j) s[0] += p[j];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// Score panels per worker thread, reused across the tasks it runs.
template <typename Real>
using Scratch = tbb::enumerable_thread_specific<std::vector<Real>>;

}  // namespace

// ---

template <typename Real>
void attention_forward_gemm(Real* out, Real* lse, const Real* q, const Real* k, const Real* v,
                            int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D) {
  blas_single_threaded();
  const int64_t group = H / KV;  // query heads per kv head
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t ldq = H * D, ldk = KV * D;
  Scratch<Real> scratch(std::vector<Real>(std::min(kPanel, Tq) * Tk));
  parallel_for_index(int64_t{0}, B * H, [&](int64_t task) {
    const int64_t b = task / H, h = task % H, kh = h / group;
    const Real* Q = q + b * Tq * ldq + h * D;   // (Tq, D), row stride H*D
    const Real* K = k + b * Tk * ldk + kh * D;  // (Tk, D), row stride KV*D
    const Real* V = v + b * Tk * ldk + kh * D;
    Real* O = out + b * Tq * ldq + h * D;
    Real* L = lse + (b * H + h) * Tq;
    Real* P = scratch.local().data();  // (kPanel, Tk) scores, then probabilities
    for (int64_t r0 = 0; r0 < Tq; r0 += kPanel) {
      const int64_t rows = std::min(kPanel, Tq - r0);
      const int64_t n = Tk - Tq + r0 + rows;  // keys seen by the panel's last query
      // S (rows, n) = scale Q_panel K[0:n]^T
      gemm(CblasNoTrans, CblasTrans, rows, n, D, scale, Q + r0 * ldq, ldq, K, ldk, Real{0}, P, Tk);
      for (int64_t r = 0; r < rows; ++r) {
        Real* p = P + r * Tk;
        const int64_t keys = Tk - Tq + r0 + r + 1;  // causal: keys 0..Tk-Tq+i
        const Real m = max_row(p, keys);
        const double sum = exp_shifted_sum(p, keys, m);
        std::fill(p + keys, p + n, Real{0});
        L[r0 + r] = static_cast<Real>(m + std::log(sum));
        // Normalise the row here so the PV GEMM writes the final output.
        const Real inv = static_cast<Real>(1.0 / sum);
        for (int64_t j = 0; j < keys; ++j) p[j] *= inv;
      }
      // O_panel (rows, D) = P (rows, n) V[0:n]
      gemm(CblasNoTrans, CblasNoTrans, rows, D, n, Real{1}, P, Tk, V, ldk, Real{0}, O + r0 * ldq,
           ldq);
    }
  });
}

template <typename Real>
void attention_backward_gemm(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q,
                             const Real* k, const Real* v, const Real* out, const Real* lse,
                             int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D) {
  // With P = exp(S - lse), S = scale Q K^T (masked), per query head:
  //   dV += P^T dO,  dP = dO V^T,  dS = P o (dP - D_i),  D_i = rowsum(dO o O),
  //   dQ = scale dS K,  dK += scale dS^T Q.
  // One task per (b, kv head) owns dk, dv of that head and dq of its group's query
  // heads, so nothing races; the group's heads accumulate into dk, dv in turn.
  blas_single_threaded();
  const int64_t group = H / KV;
  const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t ldq = H * D, ldk = KV * D;
  const int64_t panel = std::min(kPanel, T);
  Scratch<Real> scratch(std::vector<Real>(2 * panel * T + panel));
  parallel_for_index(int64_t{0}, B * KV, [&](int64_t task) {
    const int64_t b = task / KV, kh = task % KV;
    const Real* K = k + b * T * ldk + kh * D;  // (T, D), row stride KV*D
    const Real* V = v + b * T * ldk + kh * D;
    Real* dK = dk + b * T * ldk + kh * D;
    Real* dV = dv + b * T * ldk + kh * D;
    for (int64_t j = 0; j < T; ++j) {
      std::fill(dK + j * ldk, dK + j * ldk + D, Real{0});
      std::fill(dV + j * ldk, dV + j * ldk + D, Real{0});
    }
    Real* P = scratch.local().data();  // (panel, T) probabilities
    Real* dS = P + panel * T;          // (panel, T) dP, then dS
    Real* Di = dS + panel * T;         // (panel) rowsum(dO o O)
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const int64_t off = b * T * ldq + h * D;  // head h of batch b in (B, T, H, D)
      const Real* Q = q + off;
      const Real* dO = dout + off;
      const Real* O = out + off;
      Real* dQ = dq + off;
      const Real* L = lse + (b * H + h) * T;
      for (int64_t r0 = 0; r0 < T; r0 += kPanel) {
        const int64_t rows = std::min(kPanel, T - r0);
        const int64_t n = r0 + rows;  // keys seen by the panel's last query
        const Real* Qp = Q + r0 * ldq;
        const Real* dOp = dO + r0 * ldq;
        gemm(CblasNoTrans, CblasTrans, rows, n, D, scale, Qp, ldq, K, ldk, Real{0}, P, T);
        for (int64_t r = 0; r < rows; ++r) {
          Real* p = P + r * T;
          const int64_t keys = r0 + r + 1;
          const Real l = L[r0 + r];
          exp_shifted(p, keys, l);
          std::fill(p + keys, p + n, Real{0});
          Di[r] = static_cast<Real>(dot_row(dOp + r * ldq, O + (r0 + r) * ldq, D));
        }
        // dV[0:n] += P^T dO_panel;  dP (rows, n) = dO_panel V[0:n]^T
        gemm(CblasTrans, CblasNoTrans, n, D, rows, Real{1}, P, T, dOp, ldq, Real{1}, dV, ldk);
        gemm(CblasNoTrans, CblasTrans, rows, n, D, Real{1}, dOp, ldq, V, ldk, Real{0}, dS, T);
        for (int64_t r = 0; r < rows; ++r) {
          const Real* p = P + r * T;
          Real* ds = dS + r * T;
          for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - Di[r]);
        }
        // dQ_panel = scale dS K[0:n];  dK[0:n] += scale dS^T Q_panel
        gemm(CblasNoTrans, CblasNoTrans, rows, D, n, scale, dS, T, K, ldk, Real{0}, dQ + r0 * ldq,
             ldq);
        gemm(CblasTrans, CblasNoTrans, n, D, rows, scale, dS, T, Qp, ldq, Real{1}, dK, ldk);
      }
    }
  });
}

template void attention_forward_gemm<float>(float*, float*, const float*, const float*,
                                            const float*, int64_t, int64_t, int64_t, int64_t,
                                            int64_t, int64_t);
template void attention_forward_gemm<double>(double*, double*, const double*, const double*,
                                             const double*, int64_t, int64_t, int64_t, int64_t,
                                             int64_t, int64_t);
template void attention_backward_gemm<float>(float*, float*, float*, const float*, const float*,
                                             const float*, const float*, const float*, const float*,
                                             int64_t, int64_t, int64_t, int64_t, int64_t);
template void attention_backward_gemm<double>(double*, double*, double*, const double*,
                                              const double*, const double*, const double*,
                                              const double*, const double*, int64_t, int64_t,
                                              int64_t, int64_t, int64_t);

}  // namespace fanout::ops::cpu
