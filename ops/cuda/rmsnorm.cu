// CUDA RMSNorm: one block per row for forward and for backward's dinp (double
// sums through block_sum); backward's dweight, a sum over rows, in two passes:
// blocks of (32 channels x 8 row lanes) sum a chunk of rows each into double
// partials, then one thread per channel adds the chunks in order. Deterministic.

#include <algorithm>

#include "ops/cuda/common.cuh"
#include "ops/cuda/rmsnorm.h"

namespace fanout::ops::cuda {

namespace {

constexpr int kRowLanes = 8;    // dweight: row lanes per block (blockDim.y)
constexpr int kMaxChunks = 64;  // dweight: row chunks at most (partials per channel)

int row_block(int64_t C) {
  return static_cast<int>(std::clamp<int64_t>((C + kWarp - 1) / kWarp * kWarp, kWarp, kBlock));
}

// One block per row: y = x * r * w, r = (mean(x^2) + eps)^-1/2 from a double sum.
__global__ void rmsnorm_rows(float* out, float* rstd, const float* inp, const float* weight,
                             int64_t C, float eps) {
  const float* x = inp + blockIdx.x * C;
  float* y = out + blockIdx.x * C;
  double ss = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    double v = x[c];
    ss += v * v;
  }
  ss = block_sum(ss);
  const float r = static_cast<float>(1.0 / sqrt(ss / C + static_cast<double>(eps)));
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[c] = x[c] * r * weight[c];
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// One block per row: dx_c += r w_c dy_c - r^3 x_c / C * sum_k w_k dy_k x_k, in double.
__global__ void rmsnorm_rows_grad(float* dinp, const float* dout, const float* inp,
                                  const float* weight, const float* rstd, int64_t C) {
  const float* x = inp + blockIdx.x * C;
  const float* dy = dout + blockIdx.x * C;
  float* dx = dinp + blockIdx.x * C;
  double dot = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += static_cast<double>(weight[c]) * dy[c] * x[c];
  dot = block_sum(dot);
  const double r = rstd[blockIdx.x];
  const double k = r * r * r * dot / C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dx[c] += static_cast<float>(r * weight[c] * dy[c] - k * x[c]);
}

// partial[chunk][c] = sum over the chunk's rows n of dy[n][c] x[n][c] rstd[n].
// Block (32, kRowLanes) over channels [32 bx, 32 bx + 32) and chunk blockIdx.y.
__global__ void rmsnorm_weight_grad_partial(double* partial, const float* dout, const float* inp,
                                            const float* rstd, int64_t N, int64_t C,
                                            int64_t rows_per_chunk) {
  __shared__ double lanes[kRowLanes][kWarp];
  const int64_t c = blockIdx.x * int64_t(kWarp) + threadIdx.x;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = min(N, begin + rows_per_chunk);
  double s = 0.0;
  if (c < C) {
    for (int64_t n = begin + threadIdx.y; n < end; n += kRowLanes)
      s += static_cast<double>(dout[n * C + c]) * inp[n * C + c] * rstd[n];
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double t = 0.0;
    for (int l = 0; l < kRowLanes; ++l) t += lanes[l][threadIdx.x];
    partial[blockIdx.y * C + c] = t;
  }
}

__global__ void rmsnorm_weight_grad_sum(float* dweight, const double* partial, int64_t C,
                                        int chunks) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C;
       c += int64_t(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int k = 0; k < chunks; ++k) s += partial[k * C + c];
    dweight[c] += static_cast<float>(s);
  }
}

}  // namespace

// ---

void rmsnorm_forward_f32(void* stream, float* out, float* rstd, const float* inp,
                         const float* weight, int64_t N, int64_t C, float eps) {
  if (N <= 0) return;
  const int rows = checked_int("rmsnorm_forward", "N", N);
  cudaStream_t s = stream_bind(stream);
  rmsnorm_rows<<<rows, row_block(C), 0, s>>>(out, rstd, inp, weight, C, eps);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward_f32(void* stream, float* dinp, float* dweight, const float* dout,
                          const float* inp, const float* weight, const float* rstd, int64_t N,
                          int64_t C) {
  if (N <= 0 || C <= 0) return;
  const int rows = checked_int("rmsnorm_backward", "N", N);
  cudaStream_t s = stream_bind(stream);
  rmsnorm_rows_grad<<<rows, row_block(C), 0, s>>>(dinp, dout, inp, weight, rstd, C);
  FANOUT_CUDA_LAUNCH_CHECK();

  // Enough chunks to fill the GPU, few enough that the partials stay small.
  const int chunks = static_cast<int>(std::min<int64_t>(kMaxChunks, (N + 63) / 64));
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  StreamScratch partial(sizeof(double) * chunks * C, s);
  const dim3 grid(checked_int("rmsnorm_backward", "C / 32", (C + kWarp - 1) / kWarp), chunks);
  rmsnorm_weight_grad_partial<<<grid, dim3(kWarp, kRowLanes), 0, s>>>(
      partial.as<double>(), dout, inp, rstd, N, C, rows_per_chunk);
  FANOUT_CUDA_LAUNCH_CHECK();
  rmsnorm_weight_grad_sum<<<grid_for(C), kBlock, 0, s>>>(dweight, partial.as<double>(), C, chunks);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
