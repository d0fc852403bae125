#include "ops/cpu/cross_entropy.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <tbb/parallel_for.h>

#include "engine/core/check.h"

namespace fanout::ops::cpu {

namespace {

// Every target is ignore_index or a class id; checked before any output is written.
void check_targets(const char* op, const int32_t* targets, int64_t N, int64_t V,
                   int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    int32_t t = targets[n];
    FANOUT_CHECK(t == ignore_index || (t >= 0 && t < V), op, ": target id ", t,
                 " is out of range for vocabulary size ", V, " (row ", n, "; ignore_index is ",
                 ignore_index, ")");
  }
}

// Row max and sum_v exp(x_v - max), the stable log-sum-exp: lse = max + log(sum).
// Float rows take the vectorised exp (vec_exp.h), summed in double; double rows
// keep std::exp for the tests' references.
// 16 float partial sums (a row holds a few hundred to tens of thousands of terms
// of at most 1 each), added up in double at the end: the loop vectorises.
FANOUT_VECTOR_CLONES void row_max_sum(const float* x, int64_t V, double* max_out, double* sum_out) {
  float m = x[0];
  for (int64_t v = 1; v < V; ++v) m = std::max(m, x[v]);
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  int64_t v = 0;
  for (; v + kLanes <= V; v += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += exp_vec(x[v + l] - m);
  double s = 0.0;
  for (; v < V; ++v) s += exp_vec(x[v] - m);
  for (float p : lane) s += p;
  *max_out = m;
  *sum_out = s;
}

void row_max_sum(const double* x, int64_t V, double* max_out, double* sum_out) {
  double m = x[0];
  for (int64_t v = 1; v < V; ++v) m = std::max(m, x[v]);
  double s = 0.0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(x[v] - m);
  *max_out = m;
  *sum_out = s;
}

// stats = {sum of the per-row losses, in row order (whatever the thread count),
// rows whose target is not ignore_index}.
template <typename T>
void write_loss_stats(T* stats, const std::vector<double>& loss, const int32_t* targets,
                      int32_t ignore_index) {
  double sum = 0.0;
  int64_t count = 0;
  for (size_t n = 0; n < loss.size(); ++n) {
    sum += loss[n];
    count += targets[n] != ignore_index;
  }
  stats[0] = static_cast<T>(sum);
  stats[1] = static_cast<T>(count);
}

// dx[v] = exp(x[v] - m) * scale, then the target's -1/normalizer. One body for a
// float and a bf16 dx: the bf16 row is the float row rounded once at the store.
template <typename D>
inline void softmax_grad_row_body(D* dx, const float* x, int64_t V, double m, double scale,
                                  int32_t t, double inv_norm) {
  const float mf = static_cast<float>(m), sf = static_cast<float>(scale);
  const float xt = x[t];  // read before the row is overwritten (dx may alias x)
  for (int64_t v = 0; v < V; ++v) store(dx[v], exp_vec(x[v] - mf) * sf);
  store(dx[t], static_cast<float>(std::exp(static_cast<double>(xt) - m) * scale - inv_norm));
}
FANOUT_VECTOR_CLONES void softmax_grad_row(float* dx, const float* x, int64_t V, double m,
                                           double scale, int32_t t, double inv_norm) {
  softmax_grad_row_body(dx, x, V, m, scale, t, inv_norm);
}
FANOUT_BF16_CLONES void softmax_grad_row(bf16* dx, const float* x, int64_t V, double m,
                                         double scale, int32_t t, double inv_norm) {
  softmax_grad_row_body(dx, x, V, m, scale, t, inv_norm);
}

void softmax_grad_row(double* dx, const double* x, int64_t V, double m, double scale, int32_t t,
                      double inv_norm) {
  for (int64_t v = 0; v < V; ++v) {
    double p = std::exp(x[v] - m) * scale;
    dx[v] = v == t ? p - inv_norm : p;
  }
}

}  // namespace

// ---------------------------------------------------------------------------

template <typename T>
void cross_entropy_forward(T* stats, const T* logits, const int32_t* targets, int64_t N, int64_t V,
                           int32_t ignore_index) {
  check_targets("cross_entropy_forward", targets, N, V, ignore_index);
  // Per-row losses in parallel, then a serial sum: the result does not depend on
  // the thread count (CPU resume is bit-exact).
  std::vector<double> loss(N, 0.0);
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    int32_t t = targets[n];
    if (t == ignore_index) return;
    const T* x = logits + n * V;  // (V)
    double m, s;
    row_max_sum(x, V, &m, &s);
    loss[n] = m + std::log(s) - x[t];
  });
  write_loss_stats(stats, loss, targets, ignore_index);
}

template <typename T, typename D>
void cross_entropy_backward(D* dlogits, const T* logits, const int32_t* targets, int64_t N,
                            int64_t V, int32_t ignore_index, T normalizer) {
  check_targets("cross_entropy_backward", targets, N, V, ignore_index);
  // d(lse - x_t)/dx_v = softmax_v - [v == t]. dlogits may alias logits: each row's
  // max and sum are taken before the row is written, and element v is read just
  // before it is overwritten.
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    const T* x = logits + n * V;  // (V)
    D* dx = dlogits + n * V;      // (V)
    int32_t t = targets[n];
    if (t == ignore_index) {
      std::fill(dx, dx + V, D{});  // +0 in every storage type
      return;
    }
    double m, s;
    row_max_sum(x, V, &m, &s);
    double scale = 1.0 / (s * static_cast<double>(normalizer));
    double inv_norm = 1.0 / static_cast<double>(normalizer);
    softmax_grad_row(dx, x, V, m, scale, t, inv_norm);
  });
}

// ---------------------------------------------------------------------------

// Each row is widened once into a thread's float buffer and then handled as the
// f32 kernels handle theirs: row_max_sum in double, losses summed in row order.
void cross_entropy_fused_forward(float* stats, float* lse, const bf16* logits,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t ld,
                                 int32_t ignore_index) {
  check_targets("cross_entropy_fused_forward", targets, N, V, ignore_index);
  std::vector<double> loss(N, 0.0);
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    const int32_t t = targets[n];
    if (t == ignore_index) {
      lse[n] = 0.0f;
      return;
    }
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(V));
    const bf16* x = logits + n * ld;  // (V)
    for (int64_t v = 0; v < V; ++v) row[v] = load(x[v]);
    double m, s;
    row_max_sum(row.data(), V, &m, &s);
    const double l = m + std::log(s);
    lse[n] = static_cast<float>(l);
    loss[n] = l - row[t];
  });
  write_loss_stats(stats, loss, targets, ignore_index);
}

namespace {
// dx_v = exp(x_v - lse) / normalizer, minus 1 / normalizer at the target, in
// float, rounded once: the formula the CUDA kernel runs.
FANOUT_BF16_CLONES void fused_grad_row(bf16* x, int64_t V, float lse, int32_t t, float inv_norm) {
  const float pt = exp_vec(load(x[t]) - lse);
  for (int64_t v = 0; v < V; ++v) store(x[v], exp_vec(load(x[v]) - lse) * inv_norm);
  store(x[t], (pt - 1.0f) * inv_norm);
}
}  // namespace

void cross_entropy_fused_backward(bf16* logits, const float* lse, const int32_t* targets, int64_t N,
                                  int64_t V, int64_t ld, int32_t ignore_index, float normalizer) {
  check_targets("cross_entropy_fused_backward", targets, N, V, ignore_index);
  const float inv_norm = static_cast<float>(1.0 / static_cast<double>(normalizer));
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    bf16* x = logits + n * ld;  // (V)
    const int32_t t = targets[n];
    if (t == ignore_index) {
      std::fill(x, x + V, bf16{});
      return;
    }
    fused_grad_row(x, V, lse[n], t, inv_norm);
  });
}

template void cross_entropy_forward<float>(float*, const float*, const int32_t*, int64_t, int64_t,
                                           int32_t);
template void cross_entropy_forward<double>(double*, const double*, const int32_t*, int64_t,
                                            int64_t, int32_t);
template void cross_entropy_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t,
                                            int32_t, float);
template void cross_entropy_backward<float, bf16>(bf16*, const float*, const int32_t*, int64_t,
                                                  int64_t, int32_t, float);
template void cross_entropy_backward<double>(double*, const double*, const int32_t*, int64_t,
                                             int64_t, int32_t, double);

}  // namespace fanout::ops::cpu
