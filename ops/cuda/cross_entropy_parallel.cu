// CUDA vocabulary-parallel cross-entropy (Note [Vocabulary-parallel cross-entropy],
// ops/cross_entropy_parallel.h). Forward: one block per row of the shard's logits
// (blocks stride over the rows), coalesced reads of the row for its max, then for
// sum exp(x - max) in double, as ops/cuda/cross_entropy.cu does. Combine: S parts
// a row are a few floats, so one thread per row, then one block sums the losses
// and the count in a fixed order. Backward: one block per row; each element is
// read and written by the same thread, so dlogits may alias logits.

#include <math_constants.h>

#include <algorithm>

#include "engine/core/bf16.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/cross_entropy_parallel.h"
#include "ops/cuda/elementwise.cuh"

namespace fanout::ops::cuda {

namespace {

constexpr int kMaxRowBlocks = 1 << 16;

// part[3n..3n+2] = {max, sum exp(x - max), target logit or 0} of the row's cols
// logits; {-inf, 0, 0} when cols == 0 (no element: the reductions' identities).
__global__ void shard_row_part(float* part, const float* logits, const int32_t* targets, int64_t N,
                               int64_t cols, int64_t ld, int64_t v0, int64_t V,
                               int32_t ignore_index) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = targets[n];  // uniform over the block: the branches keep barriers safe
    float* p = part + 3 * n;
    if (t == ignore_index) {
      if (threadIdx.x == 0) p[0] = p[1] = p[2] = 0.0f;
      continue;
    }
    const float* x = logits + n * ld;  // (cols)
    float m = -CUDART_INF_F;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[j]);
    m = block_max(m, -CUDART_INF_F);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(x[j] - m);
    s = block_sum(s);
    if (threadIdx.x == 0) {
      const int64_t tj = static_cast<int64_t>(t) - v0;
      p[0] = m;
      p[1] = static_cast<float>(s);
      p[2] = !(t >= 0 && t < V) ? CUDART_NAN_F : tj >= 0 && tj < cols ? x[tj] : 0.0f;
    }
  }
}

// loss[n] = lse - sum of the shards' target logits (double) and lse (N) as float,
// the CPU twin's formula; 0 for an ignored row. Shards with an empty sum are skipped.
__global__ void shard_combine_rows(double* loss, float* lse, const float* parts,
                                   const int32_t* targets, int64_t N, int64_t S,
                                   int32_t ignore_index) {
  for (int64_t n = grid_thread(); n < N; n += grid_stride()) {
    if (targets[n] == ignore_index) {
      loss[n] = 0.0;
      lse[n] = 0.0f;
      continue;
    }
    double M = -CUDART_INF;
    for (int64_t s = 0; s < S; ++s) {
      const float* p = parts + (s * N + n) * 3;
      if (p[1] != 0.0f) M = fmax(M, static_cast<double>(p[0]));
    }
    double z = 0.0, target_logit = 0.0;
    for (int64_t s = 0; s < S; ++s) {
      const float* p = parts + (s * N + n) * 3;
      if (p[1] != 0.0f) z += static_cast<double>(p[1]) * exp(static_cast<double>(p[0]) - M);
      target_logit += p[2];
    }
    const double l = M + log(z);
    lse[n] = static_cast<float>(l);
    loss[n] = l - target_logit;
  }
}

// exp(x - lse) without the rounding of the subtraction, as the CPU twin takes it
// (ops/cpu/cross_entropy_parallel.cpp, exp_sub): hi + lo = x - lse exactly.
__device__ inline float exp_sub(float x, float lse) {
  const float hi = x - lse, bb = hi - x;
  const float lo = (x - (hi - bb)) - (lse + bb);
  const float e = expf(hi);
  return hi > -87.0f ? e + e * lo : e;
}

// dx_j = (exp(x_j - lse) - [v0 + j == t]) / normalizer for j < cols, 0 for j in
// [cols, ld) and on an ignored row, NaN on a row with a negative target. DX is
// float (dx may alias x) or bf16 (a separate buffer, the f32 value rounded once).
template <typename DX>
__global__ void shard_row_grad(DX* dlogits, const float* logits, const float* lse,
                               const int32_t* targets, int64_t N, int64_t cols, int64_t ld,
                               int64_t v0, int32_t ignore_index, float inv_norm) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = targets[n];
    const float* x = logits + n * ld;
    DX* dx = dlogits + n * ld;
    const bool ignored = t == ignore_index, valid = t >= 0;
    const float l = ignored ? 0.0f : lse[n];
    const int64_t tj = static_cast<int64_t>(t) - v0;
    for (int64_t j = threadIdx.x; j < ld; j += blockDim.x) {
      float g = 0.0f;
      if (!ignored && j < cols) {
        const float p = exp_sub(x[j], l);
        g = !valid ? CUDART_NAN_F : (j == tj ? p - 1.0f : p) * inv_norm;
      }
      store(dx, j, g);
    }
  }
}

int row_blocks(int64_t N) {
  return static_cast<int>(std::min<int64_t>(N, kMaxRowBlocks));
}

template <typename DX>
void shard_backward(void* stream, DX* dlogits, const float* logits, const float* lse,
                    const int32_t* targets, int64_t N, int64_t cols, int64_t ld, int64_t v0,
                    int32_t ignore_index, float normalizer) {
  if (N <= 0 || ld <= 0) return;
  BoundStream s(stream);
  const float inv_norm = static_cast<float>(1.0 / static_cast<double>(normalizer));
  shard_row_grad<<<row_blocks(N), kBlock, 0, s>>>(dlogits, logits, lse, targets, N, cols, ld, v0,
                                                  ignore_index, inv_norm);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace

// ---

void cross_entropy_shard_forward(void* stream, float* part, const float* logits,
                                 const int32_t* targets, int64_t N, int64_t cols, int64_t ld,
                                 int64_t v0, int64_t V, int32_t ignore_index) {
  if (N <= 0) return;
  BoundStream s(stream);
  shard_row_part<<<row_blocks(N), kBlock, 0, s>>>(part, logits, targets, N, cols, ld, v0, V,
                                                  ignore_index);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_shard_combine(void* stream, float* stats, float* lse, const float* parts,
                                 const int32_t* targets, int64_t N, int64_t S,
                                 int32_t ignore_index) {
  BoundStream s(stream);
  StreamScratch loss(sizeof(double) * std::max<int64_t>(N, 0), s);
  if (N > 0) {
    shard_combine_rows<<<grid_for(N), kBlock, 0, s>>>(loss.as<double>(), lse, parts, targets, N, S,
                                                      ignore_index);
    FANOUT_CUDA_LAUNCH_CHECK();
  }
  cross_entropy_sum_rows(stream, stats, loss.as<double>(), targets, N, ignore_index);
}

void cross_entropy_shard_backward_f32(void* stream, float* dlogits, const float* logits,
                                      const float* lse, const int32_t* targets, int64_t N,
                                      int64_t cols, int64_t ld, int64_t v0, int32_t ignore_index,
                                      float normalizer) {
  shard_backward(stream, dlogits, logits, lse, targets, N, cols, ld, v0, ignore_index, normalizer);
}

void cross_entropy_shard_backward_f32_to_bf16(void* stream, uint16_t* dlogits, const float* logits,
                                              const float* lse, const int32_t* targets, int64_t N,
                                              int64_t cols, int64_t ld, int64_t v0,
                                              int32_t ignore_index, float normalizer) {
  shard_backward(stream, dlogits, logits, lse, targets, N, cols, ld, v0, ignore_index, normalizer);
}

}  // namespace fanout::ops::cuda
