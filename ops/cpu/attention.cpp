#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {

template <typename Real>
double dot_row(const Real* a, const Real* b, int64_t D) {
  double s = 0.0;
  for (int64_t d = 0; d < D; ++d) s += static_cast<double>(a[d]) * b[d];
  return s;
}

}  // namespace

// ---

template <typename Real>
void attention_forward(Real* out, Real* lse, const Real* q, const Real* k, const Real* v, int64_t B,
                       int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D) {
  const int64_t group = H / KV;  // query heads per kv head
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // Every (b, h, i) query row is independent; one scores buffer per chunk of rows.
  auto rows_fn = [&](const tbb::blocked_range<int64_t>& rows) {
    std::vector<double> s(Tk), acc(D);
    for (int64_t r = rows.begin(); r < rows.end(); ++r) {
      const int64_t b = r / (H * Tq), h = (r / Tq) % H, i = r % Tq;
      const int64_t kh = h / group;
      const int64_t last = Tk - Tq + i;  // causal: keys 0..last
      const Real* qi = q + ((b * Tq + i) * H + h) * D;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= last; ++j) {
        s[j] = scale * dot_row(qi, k + ((b * Tk + j) * KV + kh) * D, D);
        m = std::max(m, s[j]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j <= last; ++j) {
        double p = std::exp(s[j] - m);
        sum += p;
        const Real* vj = v + ((b * Tk + j) * KV + kh) * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += p * vj[d];
      }
      Real* oi = out + ((b * Tq + i) * H + h) * D;
      for (int64_t d = 0; d < D; ++d) oi[d] = static_cast<Real>(acc[d] / sum);
      lse[(b * H + h) * Tq + i] = static_cast<Real>(m + std::log(sum));
    }
  };
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, B * H * Tq), rows_fn);
}

template <typename Real>
void attention_backward(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q,
                        const Real* k, const Real* v, const Real* out, const Real* lse, int64_t B,
                        int64_t T, int64_t H, int64_t KV, int64_t D) {
  // With p_ij = exp(s_ij - lse_i), s_ij = scale q_i.k_j:
  //   dv_j += p_ij dout_i,  dp_ij = dout_i.v_j,  ds_ij = p_ij (dp_ij - D_i),
  //   D_i = sum_j p_ij dp_ij = dout_i.out_i,  dq_i = scale sum_j ds_ij k_j,
  //   dk_j += scale ds_ij q_i.
  // One task per (b, kv head) owns dk, dv of that head and dq of its group's query
  // heads, so nothing races.
  const int64_t group = H / KV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  tbb::parallel_for(int64_t{0}, B * KV, [&](int64_t task) {
    const int64_t b = task / KV, kh = task % KV;
    std::vector<double> dk_acc(T * D, 0.0), dv_acc(T * D, 0.0), dq_acc(D), p(T);
    auto k_row = [&](int64_t j) { return k + ((b * T + j) * KV + kh) * D; };
    auto v_row = [&](int64_t j) { return v + ((b * T + j) * KV + kh) * D; };
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        const int64_t row = ((b * T + i) * H + h) * D;
        const Real* qi = q + row;
        const Real* doi = dout + row;
        const double lse_i = lse[(b * H + h) * T + i];
        const double D_i = dot_row(doi, out + row, D);
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          const Real* kj = k_row(j);
          const Real* vj = v_row(j);
          double pij = std::exp(scale * dot_row(qi, kj, D) - lse_i);
          double ds = pij * (dot_row(doi, vj, D) - D_i);
          for (int64_t d = 0; d < D; ++d) {
            dv_acc[j * D + d] += pij * doi[d];
            dk_acc[j * D + d] += scale * ds * qi[d];
            dq_acc[d] += scale * ds * kj[d];
          }
        }
        for (int64_t d = 0; d < D; ++d) dq[row + d] = static_cast<Real>(dq_acc[d]);
      }
    }
    for (int64_t j = 0; j < T; ++j) {
      Real* dkj = dk + ((b * T + j) * KV + kh) * D;
      Real* dvj = dv + ((b * T + j) * KV + kh) * D;
      for (int64_t d = 0; d < D; ++d) {
        dkj[d] = static_cast<Real>(dk_acc[j * D + d]);
        dvj[d] = static_cast<Real>(dv_acc[j * D + d]);
      }
    }
  });
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
template void attention_forward<double>(double*, double*, const double*, const double*,
                                        const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                        int64_t);
template void attention_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, int64_t, int64_t, int64_t);
template void attention_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, const double*,
                                         int64_t, int64_t, int64_t, int64_t, int64_t);

}  // namespace fanout::ops::cpu
