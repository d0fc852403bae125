// CUDA cross-entropy: one block per row (blocks stride over the rows) takes the
// row max, then sum exp(x - max) in double, as the CPU reference does. Forward
// writes per-row losses to scratch and one block sums them and the count in a
// fixed order; backward reads the whole row (the block reductions end in
// barriers) before any thread writes it, so dlogits may alias logits.

#include <math_constants.h>

#include <algorithm>

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
__global__ void cross_entropy_sum_rows(float* stats, const double* loss, const int32_t* targets,
                                       int64_t N, int32_t ignore_index) {
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

// dx = (softmax(x) - onehot(t)) / normalizer; 0 for an ignored row.
__global__ void cross_entropy_row_grad(float* dlogits, const float* logits, const int32_t* targets,
                                       int64_t N, int64_t V, int32_t ignore_index,
                                       float normalizer) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t t = targets[n];
    const float* x = logits + n * V;
    float* dx = dlogits + n * V;
    if (t == ignore_index) {
      for (int64_t v = threadIdx.x; v < V; v += blockDim.x) dx[v] = 0.0f;
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
      dx[v] = !valid ? CUDART_NAN_F : v == t ? p - inv_norm : p;
    }
  }
}

int row_blocks(int64_t N) {
  return static_cast<int>(std::min<int64_t>(N, kMaxRowBlocks));
}

}  // namespace

// ---

void cross_entropy_forward_f32(void* stream, float* stats, const float* logits,
                               const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index) {
  cudaStream_t s = stream_bind(stream);
  StreamScratch loss(sizeof(double) * std::max<int64_t>(N, 0), s);
  if (N > 0) {
    cross_entropy_row_loss<<<row_blocks(N), kBlock, 0, s>>>(loss.as<double>(), logits, targets, N,
                                                            V, ignore_index);
    FANOUT_CUDA_LAUNCH_CHECK();
  }
  cross_entropy_sum_rows<<<1, kSumBlock, 0, s>>>(stats, loss.as<double>(), targets,
                                                 std::max<int64_t>(N, 0), ignore_index);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_backward_f32(void* stream, float* dlogits, const float* logits,
                                const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index,
                                float normalizer) {
  if (N <= 0) return;
  cudaStream_t s = stream_bind(stream);
  cross_entropy_row_grad<<<row_blocks(N), kBlock, 0, s>>>(dlogits, logits, targets, N, V,
                                                          ignore_index, normalizer);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
