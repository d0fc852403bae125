#include "ops/cpu/matmul.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include <cblas.h>

#include "engine/core/check.h"
#include "ops/cpu/cast.h"
#include "ops/cpu/matmul_dnnl.h"
#include "ops/cpu/residual.h"

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

template <typename T>
constexpr DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::bf16;
}

// C (M, N) (+)= A B as GemmDesc says, one overload per storage type.
void gemm(const GemmDesc& g, const double* A, const double* B, double* C) {
  blas_single_threaded();
  cblas_dgemm(CblasRowMajor, g.a_trans ? CblasTrans : CblasNoTrans,
              g.b_trans ? CblasTrans : CblasNoTrans, blas_dim(g.M), blas_dim(g.N), blas_dim(g.K),
              1.0, A, blas_dim(g.a_stride()), B, blas_dim(g.b_trans ? g.K : g.N),
              g.accumulate ? 1.0 : 0.0, C, blas_dim(g.c_stride()));
}

void gemm(const GemmDesc& g, const float* A, const float* B, float* C) {
  gemm_dnnl(g, A, B, C);
}

// fp32 copies for the widened bf16 path, held by the thread between calls; one
// past kKeepFloats (the seed preset's lm_head) is freed after its call instead.
constexpr size_t kKeepFloats = size_t{16} << 20;

class WideBuffer {
 public:
  WideBuffer(std::vector<float>& storage, size_t n) : storage_(storage) {
    if (storage_.size() < n) storage_.resize(n);
  }
  ~WideBuffer() {
    if (storage_.size() > kKeepFloats) std::vector<float>().swap(storage_);
  }
  float* data() { return storage_.data(); }

 private:
  std::vector<float>& storage_;
};

float* widen(WideBuffer& buf, const bf16* src, int64_t n) {
  cast_bf16_to_f32(buf.data(), reinterpret_cast<const uint16_t*>(src), n);
  return buf.data();
}

// Without bf16 instructions oneDNN 2.6 emulates bf16 GEMMs (about 80 GFLOP/s on
// AVX-512 against 230 for fp32) or has none (AVX2): widen the inputs (exact) and
// run the fp32 GEMM. The arithmetic is the same fp32 accumulation either way.
template <typename Out>
void gemm_widened(const GemmDesc& g, const bf16* A, const bf16* B, Out* C) {
  thread_local std::vector<float> a_store, b_store, c_store;
  // A's stored extent: its rows (K of them transposed, else M) at a_stride() apart.
  const int64_t a_rows = g.a_trans ? g.K : g.M, a_cols = g.a_trans ? g.M : g.K;
  const int64_t a_n = (a_rows - 1) * g.a_stride() + a_cols;
  WideBuffer a(a_store, a_n), b(b_store, g.K * g.N);
  GemmDesc f32 = g;
  f32.in = f32.out = DType::f32;
  if constexpr (std::is_same_v<Out, float>) {
    gemm_dnnl(f32, widen(a, A, a_n), widen(b, B, g.K * g.N), C);
  } else {
    WideBuffer c(c_store, g.M * g.N);
    f32.ldc = 0;  // dense scratch; its rows go to C's, c_stride() apart
    gemm_dnnl(f32, widen(a, A, a_n), widen(b, B, g.K * g.N), c.data());
    for (int64_t i = 0; i < g.M; ++i) {
      cast_f32_to_bf16(reinterpret_cast<uint16_t*>(C + i * g.c_stride()), c.data() + i * g.N, g.N);
    }
  }
}

template <typename Out>
void gemm(GemmDesc g, const bf16* A, const bf16* B, Out* C) {
  g.in = DType::bf16;
  g.out = dtype_of<Out>();
  if (dnnl_has_bf16_instructions()) {
    gemm_dnnl(g, A, B, C);
  } else {
    gemm_widened(g, A, B, C);
  }
}

}  // namespace

// ---------------------------------------------------------------------------

template <typename Out, typename In>
void matmul_forward(Out* out, const In* inp, const In* weight, int64_t N, int64_t C, int64_t OC,
                    int64_t ld_out) {
  if (ld_out == 0) ld_out = OC;
  FANOUT_ASSERT(ld_out >= OC, "matmul_forward: ld_out ", ld_out, " < OC ", OC);
  if (N == 0 || OC == 0) return;
  if (C == 0) {  // an empty sum; oneDNN takes no zero dimensions
    for (int64_t i = 0; i < N; ++i) std::fill(out + i * ld_out, out + i * ld_out + OC, Out{});
    return;
  }
  // out (N, OC) = inp (N, C) . weight (OC, C)^T, out's rows ld_out apart.
  gemm(GemmDesc{.M = N, .N = OC, .K = C, .b_trans = true, .ldc = ld_out}, inp, weight, out);
}

template <typename In>
void matmul_forward_residual(float* out, const float* residual, const In* inp, const In* weight,
                             int64_t N, int64_t C, int64_t OC) {
  // The product kept apart from out (which may be residual), then the add of
  // ops::residual_forward itself, so the bits are those of the two ops in turn.
  thread_local std::vector<float> store;
  WideBuffer product(store, N * OC);
  matmul_forward(product.data(), inp, weight, N, C, OC);
  residual_forward(out, residual, product.data(), N * OC);
}

template <typename Grad, typename In>
void matmul_backward(Grad* dinp, Grad* dweight, const In* dout, const In* inp, const In* weight,
                     int64_t N, int64_t C, int64_t OC, int64_t ld_dout, bool dinp_add) {
  if (ld_dout == 0) ld_dout = OC;
  FANOUT_ASSERT(ld_dout >= OC, "matmul_backward: ld_dout ", ld_dout, " < OC ", OC);
  // An empty sum: dinp = 0 when it is overwritten; every other product adds 0.
  if (OC == 0 && dinp != nullptr && !dinp_add) std::fill(dinp, dinp + N * C, Grad{0});
  if (N == 0 || C == 0 || OC == 0) return;
  // dinp (N, C) (+)= dout (N, OC) . weight (OC, C), dout's rows ld_dout apart.
  if (dinp != nullptr)
    gemm(GemmDesc{.M = N, .N = C, .K = OC, .accumulate = dinp_add, .lda = ld_dout}, dout, weight,
         dinp);
  // dweight (OC, C) += dout (N, OC)^T . inp (N, C)
  if (dweight != nullptr)
    gemm(GemmDesc{.M = OC, .N = C, .K = N, .a_trans = true, .accumulate = true, .lda = ld_dout},
         dout, inp, dweight);
}

template <typename Grad, typename In>
void matmul_backward_weight_rows(Grad* dweight_rows, const In* dout, const In* inp, int64_t N,
                                 int64_t C, int64_t OC, int64_t row0, int64_t rows,
                                 int64_t ld_dout) {
  if (ld_dout == 0) ld_dout = OC;
  FANOUT_ASSERT(ld_dout >= OC, "matmul_backward_weight_rows: ld_dout ", ld_dout, " < OC ", OC);
  if (N == 0 || C == 0 || rows == 0) return;
  // dweight[row0 : row0 + rows] (rows, C) += dout[:, row0 : row0 + rows]^T . inp (N, C):
  // the block of dout's columns is A, stored transposed with its rows ld_dout apart.
  gemm(GemmDesc{.M = rows, .N = C, .K = N, .a_trans = true, .accumulate = true, .lda = ld_dout},
       dout + row0, inp, dweight_rows);
}

std::string matmul_engine(DType in) {
  const std::string isa = dnnl_cpu_isa_name();
  if (in == DType::f32) return "oneDNN fp32 (" + isa + ")";
  FANOUT_ASSERT(in == DType::bf16, "matmul: no CPU GEMM for ", dtype_name(in));
  return matmul_bf16_native() ? "oneDNN bf16 (" + isa + ")"
                              : "bf16 widened to fp32, oneDNN fp32 (" + isa + ")";
}

bool matmul_bf16_native() {
  return dnnl_has_bf16_instructions();
}

template void matmul_forward<double, double>(double*, const double*, const double*, int64_t,
                                             int64_t, int64_t, int64_t);
template void matmul_forward<float, float>(float*, const float*, const float*, int64_t, int64_t,
                                           int64_t, int64_t);
template void matmul_forward<float, bf16>(float*, const bf16*, const bf16*, int64_t, int64_t,
                                          int64_t, int64_t);
template void matmul_forward<bf16, bf16>(bf16*, const bf16*, const bf16*, int64_t, int64_t, int64_t,
                                         int64_t);
template void matmul_forward_residual<float>(float*, const float*, const float*, const float*,
                                             int64_t, int64_t, int64_t);
template void matmul_forward_residual<bf16>(float*, const float*, const bf16*, const bf16*, int64_t,
                                            int64_t, int64_t);
template void matmul_backward<double, double>(double*, double*, const double*, const double*,
                                              const double*, int64_t, int64_t, int64_t, int64_t,
                                              bool);
template void matmul_backward<float, float>(float*, float*, const float*, const float*,
                                            const float*, int64_t, int64_t, int64_t, int64_t, bool);
template void matmul_backward<float, bf16>(float*, float*, const bf16*, const bf16*, const bf16*,
                                           int64_t, int64_t, int64_t, int64_t, bool);
template void matmul_backward_weight_rows<double, double>(double*, const double*, const double*,
                                                          int64_t, int64_t, int64_t, int64_t,
                                                          int64_t, int64_t);
template void matmul_backward_weight_rows<float, float>(float*, const float*, const float*, int64_t,
                                                        int64_t, int64_t, int64_t, int64_t,
                                                        int64_t);
template void matmul_backward_weight_rows<float, bf16>(float*, const bf16*, const bf16*, int64_t,
                                                       int64_t, int64_t, int64_t, int64_t, int64_t);

}  // namespace fanout::ops::cpu
