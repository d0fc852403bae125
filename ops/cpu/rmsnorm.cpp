#include "ops/cpu/rmsnorm.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {

// sum_c a[c] * b[c] in double. For float rows, 16 float lanes (one AVX-512
// register in that clone) hold the partial sums of C/16 terms each, added in
// double at the end: the loop vectorises without reassociation flags, and the
// error stays near float's epsilon. Double rows (the tests' oracle) sum in double.
template <typename T>
FANOUT_VECTOR_CLONES double dot_row(const T* __restrict a, const T* __restrict b, int64_t C) {
  if constexpr (std::is_same_v<T, double>) {
    double s = 0.0;
    for (int64_t c = 0; c < C; ++c) s += a[c] * b[c];
    return s;
  } else {
    float acc[16] = {};
    int64_t c = 0;
    for (; c + 16 <= C; c += 16)
      for (int j = 0; j < 16; ++j) acc[j] += a[c + j] * b[c + j];
    double s = 0.0;
    for (int j = 0; j < 16; ++j) s += acc[j];
    for (; c < C; ++c) s += static_cast<double>(a[c]) * b[c];
    return s;
  }
}

// y = x r w, rounded once to Out.
template <typename T, typename Out, typename W>
FANOUT_VECTOR_CLONES void scale_row(Out* __restrict y, const T* __restrict x,
                                    const W* __restrict weight, T r, int64_t C) {
  for (int64_t c = 0; c < C; ++c) store(y[c], x[c] * r * static_cast<T>(load(weight[c])));
}

// dx += r w dy - k x, for one row.
template <typename T, typename W>
FANOUT_VECTOR_CLONES void dx_row(T* __restrict dx, const T* __restrict dy, const T* __restrict x,
                                 const W* __restrict weight, double r, double k, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    dx[c] += static_cast<T>(r * static_cast<T>(load(weight[c])) * dy[c] - k * x[c]);
  }
}

// w dy, as the dot product with x needs it (the weight in T, as forward used it).
template <typename T, typename W>
FANOUT_VECTOR_CLONES void weighted_row(T* __restrict out, const T* __restrict dy,
                                       const W* __restrict weight, int64_t C) {
  for (int64_t c = 0; c < C; ++c) out[c] = static_cast<T>(load(weight[c])) * dy[c];
}

// dw[c] += dy x r over the rows (double sums: the weight gradient of many rows).
template <typename T>
FANOUT_VECTOR_CLONES void dweight_rows(double* __restrict dw, const T* __restrict dout,
                                       const T* __restrict inp, const T* __restrict rstd, int64_t N,
                                       int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    double r = rstd[n];
    for (int64_t c = 0; c < C; ++c) dw[c] += static_cast<double>(dy[c]) * x[c] * r;
  }
}

}  // namespace

template <typename T, typename Out, typename W>
void rmsnorm_forward(Out* out, T* rstd, const T* inp, const W* weight, int64_t N, int64_t C,
                     T eps) {
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    const T* x = inp + n * C;
    double ss = dot_row(x, x, C);
    T r = static_cast<T>(1.0 / std::sqrt(ss / C + eps));
    // The same T expression for every storage type: a bf16 output is the f32 one
    // rounded once.
    scale_row(out + n * C, x, weight, r, C);
    rstd[n] = r;
  });
}

template <typename T, typename W>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const W* weight,
                      const T* rstd, int64_t N, int64_t C) {
  // y_c = x_c r w_c with r = (mean(x^2) + eps)^-1/2, dr/dx_c = -r^3 x_c / C, so
  // dx_c = r (w_c dy_c) - r^3 x_c / C * sum_k (w_k dy_k x_k).
  // Rows are independent for dinp; dweight sums over rows, so it is reduced serially.
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    thread_local std::vector<T> wdy;
    wdy.resize(C);
    weighted_row(wdy.data(), dy, weight, C);
    double r = rstd[n];
    double dot = dot_row(wdy.data(), x, C);
    double k = r * r * r * dot / C;
    dx_row(dinp + n * C, dy, x, weight, r, k, C);
  });
  std::vector<double> dw(C, 0.0);
  dweight_rows(dw.data(), dout, inp, rstd, N, C);
  for (int64_t c = 0; c < C; ++c) dweight[c] += static_cast<T>(dw[c]);
}

template void rmsnorm_forward<float, float, float>(float*, float*, const float*, const float*,
                                                   int64_t, int64_t, float);
template void rmsnorm_forward<float, float, bf16>(float*, float*, const float*, const bf16*,
                                                  int64_t, int64_t, float);
template void rmsnorm_forward<float, bf16, float>(bf16*, float*, const float*, const float*,
                                                  int64_t, int64_t, float);
template void rmsnorm_forward<float, bf16, bf16>(bf16*, float*, const float*, const bf16*, int64_t,
                                                 int64_t, float);
template void rmsnorm_forward<double, double, double>(double*, double*, const double*,
                                                      const double*, int64_t, int64_t, double);
template void rmsnorm_backward<float, float>(float*, float*, const float*, const float*,
                                             const float*, const float*, int64_t, int64_t);
template void rmsnorm_backward<float, bf16>(float*, float*, const float*, const float*, const bf16*,
                                            const float*, int64_t, int64_t);
template void rmsnorm_backward<double, double>(double*, double*, const double*, const double*,
                                               const double*, const double*, int64_t, int64_t);

}  // namespace fanout::ops::cpu
