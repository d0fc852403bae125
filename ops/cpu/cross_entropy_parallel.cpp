#include "ops/cpu/cross_entropy_parallel.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/check.h"

namespace fanout::ops::cpu {

namespace {

// Every target is ignore_index or a class id; checked before any output is written.
void check_targets(const char* op, const int32_t* targets, int64_t N, int64_t V,
                   int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = targets[n];
    FANOUT_CHECK(t == ignore_index || (t >= 0 && t < V), op, ": target id ", t,
                 " is out of range for vocabulary size ", V, " (row ", n, "; ignore_index is ",
                 ignore_index, ")");
  }
}

// The part of that check that needs no V (the backward's: the forward checked V).
void check_targets_nonnegative(const char* op, const int32_t* targets, int64_t N,
                               int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = targets[n];
    FANOUT_CHECK(t == ignore_index || t >= 0, op, ": target id ", t,
                 " is negative and not ignore_index (row ", n, "; ignore_index is ", ignore_index,
                 ")");
  }
}

// Row max and sum_j exp(x_j - max) over cols > 0 floats, as ops/cpu/cross_entropy.cpp
// takes them: the vectorised exp into 16 float lanes, added up in double.
FANOUT_VECTOR_CLONES void row_max_sum(const float* x, int64_t cols, float* max_out,
                                      double* sum_out) {
  float m = x[0];
  for (int64_t j = 1; j < cols; ++j) m = std::max(m, x[j]);
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += exp_vec(x[j + l] - m);
  double s = 0.0;
  for (; j < cols; ++j) s += exp_vec(x[j] - m);
  for (float p : lane) s += p;
  *max_out = m;
  *sum_out = s;
}

// exp(x - lse) without the rounding of the subtraction: x - lse rounded to float
// is off by up to half an ulp of |x - lse| (5e-7 relative in the result near
// |x - lse| = 8, as much as the f32 lse's own rounding), so its exact error lo
// is recovered (Knuth's TwoSum: no products, safe under FMA contraction) and
// exp(hi + lo) taken as exp(hi) * (1 + lo). lo is dropped where exp(hi) is 0
// anyway (x = -inf would make it NaN).
inline float exp_sub(float x, float lse) {
  const float hi = x - lse, bb = hi - x;
  const float lo = (x - (hi - bb)) - (lse + bb);
  const int32_t keep = hi > -87.0f ? -1 : 0;  // an integer mask: float selects stop the vectoriser
  const float e = exp_vec(hi);
  return e + e * std::bit_cast<float>(std::bit_cast<int32_t>(lo) & keep);
}

// dx_j = exp(x_j - lse) / normalizer for j < cols, less 1 / normalizer at column
// tj (when 0 <= tj < cols), and 0 for j in [cols, ld). One body for a float and a
// bf16 dx: the bf16 row is the float row rounded once at the store.
template <typename D>
inline void shard_grad_row_body(D* dx, const float* x, int64_t cols, int64_t ld, float lse,
                                int64_t tj, float inv_norm) {
  const bool here = tj >= 0 && tj < cols;
  const float pt = here ? exp_sub(x[tj], lse) : 0.0f;  // read before dx (maybe x) is written
  for (int64_t j = 0; j < cols; ++j) store(dx[j], exp_sub(x[j], lse) * inv_norm);
  std::fill(dx + cols, dx + ld, D{});
  if (here) store(dx[tj], (pt - 1.0f) * inv_norm);
}
FANOUT_VECTOR_CLONES void shard_grad_row(float* dx, const float* x, int64_t cols, int64_t ld,
                                         float lse, int64_t tj, float inv_norm) {
  shard_grad_row_body(dx, x, cols, ld, lse, tj, inv_norm);
}
FANOUT_BF16_CLONES void shard_grad_row(bf16* dx, const float* x, int64_t cols, int64_t ld,
                                       float lse, int64_t tj, float inv_norm) {
  shard_grad_row_body(dx, x, cols, ld, lse, tj, inv_norm);
}

template <typename D>
void shard_backward(D* dlogits, const float* logits, const float* lse, const int32_t* targets,
                    int64_t N, int64_t cols, int64_t ld, int64_t v0, int32_t ignore_index,
                    float normalizer) {
  check_targets_nonnegative("cross_entropy_shard_backward", targets, N, ignore_index);
  const float inv_norm = static_cast<float>(1.0 / static_cast<double>(normalizer));
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    D* dx = dlogits + n * ld;  // (ld)
    const int32_t t = targets[n];
    if (t == ignore_index) {
      std::fill(dx, dx + ld, D{});  // +0 in every storage type
      return;
    }
    shard_grad_row(dx, logits + n * ld, cols, ld, lse[n], static_cast<int64_t>(t) - v0, inv_norm);
  });
}

}  // namespace

// ---------------------------------------------------------------------------

void cross_entropy_shard_forward(float* part, const float* logits, const int32_t* targets,
                                 int64_t N, int64_t cols, int64_t ld, int64_t v0, int64_t V,
                                 int32_t ignore_index) {
  check_targets("cross_entropy_shard_forward", targets, N, V, ignore_index);
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    float* p = part + 3 * n;  // {max, sum, target logit}
    const int32_t t = targets[n];
    if (t == ignore_index) {
      p[0] = p[1] = p[2] = 0.0f;
      return;
    }
    if (cols == 0) {  // a shard of padding alone: it drops out of the combination
      p[0] = -std::numeric_limits<float>::infinity();
      p[1] = p[2] = 0.0f;
      return;
    }
    const float* x = logits + n * ld;  // (cols)
    float m;
    double s;
    row_max_sum(x, cols, &m, &s);
    const int64_t tj = static_cast<int64_t>(t) - v0;
    p[0] = m;
    p[1] = static_cast<float>(s);
    p[2] = tj >= 0 && tj < cols ? x[tj] : 0.0f;
  });
}

void cross_entropy_shard_combine(float* stats, float* lse, const float* parts,
                                 const int32_t* targets, int64_t N, int64_t S,
                                 int32_t ignore_index) {
  // Per-row losses in parallel, then a serial sum in row order: the result does not
  // depend on the thread count, as in cross_entropy_forward.
  std::vector<double> loss(N, 0.0);
  parallel_for_index(int64_t{0}, N, [&](int64_t n) {
    if (targets[n] == ignore_index) {
      lse[n] = 0.0f;
      return;
    }
    // Shards with an empty sum (no columns) are skipped: their max is -inf.
    double M = -std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < S; ++s) {
      const float* p = parts + (s * N + n) * 3;
      if (p[1] != 0.0f) M = std::max(M, static_cast<double>(p[0]));
    }
    double z = 0.0, target_logit = 0.0;
    for (int64_t s = 0; s < S; ++s) {
      const float* p = parts + (s * N + n) * 3;
      if (p[1] != 0.0f) z += static_cast<double>(p[1]) * std::exp(static_cast<double>(p[0]) - M);
      target_logit += p[2];
    }
    const double l = M + std::log(z);
    lse[n] = static_cast<float>(l);
    loss[n] = l - target_logit;
  });
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    sum += loss[n];
    count += targets[n] != ignore_index;
  }
  stats[0] = static_cast<float>(sum);
  stats[1] = static_cast<float>(count);
}

void cross_entropy_shard_backward(float* dlogits, const float* logits, const float* lse,
                                  const int32_t* targets, int64_t N, int64_t cols, int64_t ld,
                                  int64_t v0, int32_t ignore_index, float normalizer) {
  shard_backward(dlogits, logits, lse, targets, N, cols, ld, v0, ignore_index, normalizer);
}

void cross_entropy_shard_backward(bf16* dlogits, const float* logits, const float* lse,
                                  const int32_t* targets, int64_t N, int64_t cols, int64_t ld,
                                  int64_t v0, int32_t ignore_index, float normalizer) {
  shard_backward(dlogits, logits, lse, targets, N, cols, ld, v0, ignore_index, normalizer);
}

}  // namespace fanout::ops::cpu
