// CUDA cross-entropy, on f32 logits and on the fused classifier's bf16 ones: one
// block per row (blocks stride over the rows) takes the row max, then sum
// exp(x - max) in double, as the CPU reference does. Forward
// writes per-row losses to scratch and one block sums them and the count in a
// fixed order; backward reads the whole row (the block reductions end in
// barriers) before any thread writes it, so dlogits may alias logits.

#include <math_constants.h>

#include <algorithm>

#include <cfloat>

#include "engine/core/bf16.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cross_entropy.h"

namespace fanout::ops::cuda {

namespace {

constexpr int kMaxRowBlocks = 1 << 16;
constexpr int kSumBlock = 1024;  // the final reduction's single block

// Row max (exact) and sum_v exp(x_v - max) accumulated in double, on every thread.
__device__ inline void row_max_sum(const float* x, int64_t V, float* max_out, double* sum_out) {
  float m = -CUDART_INF_F;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, x[v]);
  m = block_max(m, -CUDART_INF_F);
  double s = 0.0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += expf(x[v] - m);
  *max_out = m;
  *sum_out = block_sum(s);
}

// loss[n] = lse(logits[n]) - logits[n][t] in double; 0 for an ignored row.
__global__ void cross_entropy_row_loss(double* loss, const float* logits, const int32_t* targets,
                                       int64_t N, int64_t V, int32_t ignore_index) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = targets[n];  // uniform over the block: the branches keep barriers safe
    if (t == ignore_index) {
      if (threadIdx.x == 0) loss[n] = 0.0;
      continue;
    }
    const float* x = logits + n * V;
    float m;
    double s;
    row_max_sum(x, V, &m, &s);
    if (threadIdx.x == 0)
      loss[n] = t >= 0 && t < V ? m + log(s) - static_cast<double>(x[t]) : CUDART_NAN;
  }
}

// One block: stats = {sum of loss (double, fixed order), count of non-ignored rows}.
__global__ void sum_rows_kernel(float* stats, const double* loss, const int32_t* targets, int64_t N,
                                int32_t ignore_index) {
  double sum = 0.0;
  long long count = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    sum += loss[n];
    count += targets[n] != ignore_index;
  }
  sum = block_sum(sum);
  count = block_sum(count);
  if (threadIdx.x == 0) {
    stats[0] = static_cast<float>(sum);
    stats[1] = static_cast<float>(count);
  }
}

// dx = (softmax(x) - onehot(t)) / normalizer; 0 for an ignored row. DX is float
// (dx may alias x) or bf16 (a separate buffer, the f32 value rounded once).
template <typename DX>
__global__ void cross_entropy_row_grad(DX* dlogits, const float* logits, const int32_t* targets,
                                       int64_t N, int64_t V, int32_t ignore_index,
                                       float normalizer) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = targets[n];
    const float* x = logits + n * V;
    DX* dx = dlogits + n * V;
    if (t == ignore_index) {
      for (int64_t v = threadIdx.x; v < V; v += blockDim.x) store(dx, v, 0.0f);
      continue;
    }
    float m;
    double s;
    row_max_sum(x, V, &m, &s);  // ends in a barrier: the row is read before it is written
    const bool valid = t >= 0 && t < V;
    const float scale = static_cast<float>(1.0 / (s * static_cast<double>(normalizer)));
    const float inv_norm = static_cast<float>(1.0 / static_cast<double>(normalizer));
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
      float p = expf(x[v] - m) * scale;
      store(dx, v, !valid ? CUDART_NAN_F : v == t ? p - inv_norm : p);
    }
  }
}

// --- the fused classifier (Note [Fused classifier], ops/cross_entropy.h) ---

// One pass over a bf16 row, 16 bytes at a time where the row is aligned: each
// thread keeps an online max and sum of exp, rescaled as its max grows; the block
// merges them (the sum in double). Every thread gets the row's max and sum.
__device__ inline void row_online_max_sum(const uint16_t* x, int64_t V, float* max_out,
                                          double* sum_out) {
  float m = -FLT_MAX, s = 0.0f;  // -FLT_MAX, not -inf: exp(m - x) stays 0, never NaN
  auto add = [&](float xv) {
    if (xv > m) {
      s = s * expf(m - xv) + 1.0f;
      m = xv;
    } else {
      s += expf(xv - m);
    }
  };
  int64_t tail = 0;
  if (is_aligned16(x)) {
    constexpr int P = Pack16<uint16_t>::kSize;
    const int64_t packs = V / P;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack16<uint16_t> pk = load_pack(x + p * P);
#pragma unroll
      for (int j = 0; j < P; ++j) add(bf16_bits_to_float(pk.v[j]));
    }
    tail = packs * P;
  }
  for (int64_t v = tail + threadIdx.x; v < V; v += blockDim.x) add(load(x, v));
  const float row_max = block_max(m, -FLT_MAX);
  *max_out = row_max;
  *sum_out = block_sum(static_cast<double>(s * expf(m - row_max)));
}

// loss[n] = lse - x[t] in double and lse (N) as float; 0 for an ignored row.
__global__ void fused_row_loss(double* loss, float* lse, const uint16_t* logits,
                               const int32_t* targets, int64_t N, int64_t V, int64_t ld,
                               int32_t ignore_index) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = targets[n];  // uniform over the block
    if (t == ignore_index) {
      if (threadIdx.x == 0) loss[n] = 0.0, lse[n] = 0.0f;
      continue;
    }
    const uint16_t* x = logits + n * ld;
    float m;
    double s;
    row_online_max_sum(x, V, &m, &s);
    if (threadIdx.x == 0) {
      const double l = m + log(s);
      lse[n] = static_cast<float>(l);
      loss[n] = t >= 0 && t < V ? l - static_cast<double>(load(x, t)) : CUDART_NAN;
    }
  }
}

// x <- (exp(x - lse) - [v == t]) / normalizer in place, the formula of the CPU twin.
__device__ inline float fused_grad(float x, float lse, bool target, float inv_norm) {
  const float p = expf(x - lse);
  return (target ? p - 1.0f : p) * inv_norm;
}

__global__ void fused_row_grad(uint16_t* logits, const float* lse, const int32_t* targets,
                               int64_t N, int64_t V, int64_t ld, int32_t ignore_index,
                               float inv_norm) {
  constexpr int P = Pack16<uint16_t>::kSize;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = targets[n];
    uint16_t* x = logits + n * ld;
    const bool ignored = t == ignore_index, valid = t >= 0 && t < V;
    const float l = ignored ? 0.0f : lse[n];
    auto grad = [&](float xv, int64_t v) {
      return ignored ? 0.0f : !valid ? CUDART_NAN_F : fused_grad(xv, l, v == t, inv_norm);
    };
    int64_t tail = 0;
    if (is_aligned16(x)) {
      const int64_t packs = V / P;
      for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
        Pack16<uint16_t> pk = load_pack(x + p * P);
#pragma unroll
        for (int j = 0; j < P; ++j)
          pk.v[j] = float_to_bf16_bits(grad(bf16_bits_to_float(pk.v[j]), p * P + j));
        store_pack(x + p * P, pk);
      }
      tail = packs * P;
    }
    for (int64_t v = tail + threadIdx.x; v < V; v += blockDim.x) store(x, v, grad(load(x, v), v));
  }
}

int row_blocks(int64_t N) {
  return static_cast<int>(std::min<int64_t>(N, kMaxRowBlocks));
}

}  // namespace

// ---

void cross_entropy_sum_rows(void* stream, float* stats, const double* loss, const int32_t* targets,
                            int64_t N, int32_t ignore_index) {
  BoundStream s(stream);
  sum_rows_kernel<<<1, kSumBlock, 0, s>>>(stats, loss, targets, std::max<int64_t>(N, 0),
                                          ignore_index);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_forward_f32(void* stream, float* stats, const float* logits,
                               const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index) {
  BoundStream s(stream);
  StreamScratch loss(sizeof(double) * std::max<int64_t>(N, 0), s);
  if (N > 0) {
    cross_entropy_row_loss<<<row_blocks(N), kBlock, 0, s>>>(loss.as<double>(), logits, targets, N,
                                                            V, ignore_index);
    FANOUT_CUDA_LAUNCH_CHECK();
  }
  cross_entropy_sum_rows(stream, stats, loss.as<double>(), targets, N, ignore_index);
}

void cross_entropy_backward_f32(void* stream, float* dlogits, const float* logits,
                                const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index,
                                float normalizer) {
  if (N <= 0) return;
  BoundStream s(stream);
  cross_entropy_row_grad<<<row_blocks(N), kBlock, 0, s>>>(dlogits, logits, targets, N, V,
                                                          ignore_index, normalizer);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_backward_f32_to_bf16(void* stream, uint16_t* dlogits, const float* logits,
                                        const int32_t* targets, int64_t N, int64_t V,
                                        int32_t ignore_index, float normalizer) {
  if (N <= 0) return;
  BoundStream s(stream);
  cross_entropy_row_grad<<<row_blocks(N), kBlock, 0, s>>>(dlogits, logits, targets, N, V,
                                                          ignore_index, normalizer);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_fused_forward(void* stream, float* stats, float* lse, const uint16_t* logits,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t ld,
                                 int32_t ignore_index) {
  BoundStream s(stream);
  StreamScratch loss(sizeof(double) * std::max<int64_t>(N, 0), s);
  if (N > 0) {
    fused_row_loss<<<row_blocks(N), kBlock, 0, s>>>(loss.as<double>(), lse, logits, targets, N, V,
                                                    ld, ignore_index);
    FANOUT_CUDA_LAUNCH_CHECK();
  }
  cross_entropy_sum_rows(stream, stats, loss.as<double>(), targets, N, ignore_index);
}

void cross_entropy_fused_backward(void* stream, uint16_t* logits, const float* lse,
                                  const int32_t* targets, int64_t N, int64_t V, int64_t ld,
                                  int32_t ignore_index, float normalizer) {
  if (N <= 0) return;
  BoundStream s(stream);
  const float inv_norm = static_cast<float>(1.0 / static_cast<double>(normalizer));
  fused_row_grad<<<row_blocks(N), kBlock, 0, s>>>(logits, lse, targets, N, V, ld, ignore_index,
                                                  inv_norm);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
