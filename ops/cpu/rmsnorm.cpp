#include "ops/cpu/rmsnorm.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"

#include <cmath>
#include <vector>

#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

template <typename T, typename Out, typename W>
void rmsnorm_forward(Out* out, T* rstd, const T* inp, const W* weight, int64_t N, int64_t C,
                     T eps) {
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    const T* x = inp + n * C;
    Out* y = out + n * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * x[c];
    T r = static_cast<T>(1.0 / std::sqrt(ss / C + eps));
    // The same T expression for every storage type: a bf16 output is the f32 one
    // rounded once.
    for (int64_t c = 0; c < C; ++c) store(y[c], x[c] * r * static_cast<T>(load(weight[c])));
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
    T* dx = dinp + n * C;
    double r = rstd[n];
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      dot += static_cast<double>(static_cast<T>(load(weight[c]))) * dy[c] * x[c];
    }
    double k = r * r * r * dot / C;
    for (int64_t c = 0; c < C; ++c) {
      dx[c] += static_cast<T>(r * static_cast<T>(load(weight[c])) * dy[c] - k * x[c]);
    }
  });
  std::vector<double> dw(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    double r = rstd[n];
    for (int64_t c = 0; c < C; ++c) dw[c] += static_cast<double>(dy[c]) * x[c] * r;
  }
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
