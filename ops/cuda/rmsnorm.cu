// CUDA RMSNorm over an f32 or bf16 weight and forward output (fp32 math, one
// rounding per store): one block per row for forward and for backward's dinp
// (double sums through block_sum); backward's dweight, a sum over rows, in two passes:
// blocks of (32 channels x 8 row lanes) sum a chunk of rows each into double
// partials, then one thread per channel adds the chunks in order. Deterministic.

#include <algorithm>

#include "ops/cuda/common.cuh"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/rmsnorm.h"

namespace fanout::ops::cuda {

namespace {

constexpr int kRowLanes = 8;    // dweight: row lanes per block (blockDim.y)
constexpr int kMaxChunks = 64;  // dweight: row chunks at most (partials per channel)

int row_block(int64_t C) {
  return static_cast<int>(std::clamp<int64_t>((C + kWarp - 1) / kWarp * kWarp, kWarp, kBlock));
}

// One block per row: y = x * r * w, r = (mean(x^2) + eps)^-1/2 from a double sum,
// y in fp32 rounded once to Out. vec: 8 channels a step (C % 8 == 0, every row of
// out, inp and the weight on a 16-byte boundary).
template <typename Out, typename W>
__global__ void rmsnorm_rows(Out* out, float* rstd, const float* inp, const W* weight, int64_t C,
                             float eps, bool vec) {
  const float* x = inp + blockIdx.x * C;
  Out* y = out + blockIdx.x * C;
  double ss = 0.0;
  if (vec) {
    for (int64_t c = threadIdx.x * int64_t(kVec); c < C; c += blockDim.x * int64_t(kVec)) {
      float v[kVec];
      load8(x + c, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) ss += static_cast<double>(v[k]) * v[k];
    }
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      double v = x[c];
      ss += v * v;
    }
  }
  ss = block_sum(ss);
  const float r = static_cast<float>(1.0 / sqrt(ss / C + static_cast<double>(eps)));
  // x r w in the CPU's order, two fp32 products (no add for nvcc to fuse).
  if (vec) {
    for (int64_t c = threadIdx.x * int64_t(kVec); c < C; c += blockDim.x * int64_t(kVec)) {
      float v[kVec], w[kVec];
      load8(x + c, v);
      load8(weight + c, w);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = v[k] * r * w[k];
      store8(y + c, v);
    }
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) store(y, c, x[c] * r * load(weight, c));
  }
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// One block per row: dx_c += r w_c dy_c - r^3 x_c / C * sum_k w_k dy_k x_k, in double.
template <typename W>
__global__ void rmsnorm_rows_grad(float* dinp, const float* dout, const float* inp, const W* weight,
                                  const float* rstd, int64_t C) {
  const float* x = inp + blockIdx.x * C;
  const float* dy = dout + blockIdx.x * C;
  float* dx = dinp + blockIdx.x * C;
  double dot = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += static_cast<double>(load(weight, c)) * dy[c] * x[c];
  dot = block_sum(dot);
  const double r = rstd[blockIdx.x];
  const double k = r * r * r * dot / C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dx[c] += static_cast<float>(r * load(weight, c) * dy[c] - k * x[c]);
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

template <typename Out, typename W>
void rmsnorm_forward(void* stream, Out* out, float* rstd, const float* inp, const W* weight,
                     int64_t N, int64_t C, float eps) {
  if (N <= 0) return;
  const int rows = checked_int("rmsnorm_forward", "N", N);
  const bool vec = C % kVec == 0 && is_aligned16(out) && is_aligned16(inp) && is_aligned16(weight);
  BoundStream s(stream);
  rmsnorm_rows<<<rows, row_block(vec ? C / kVec : C), 0, s>>>(out, rstd, inp, weight, C, eps, vec);
  FANOUT_CUDA_LAUNCH_CHECK();
}

template <typename W>
void rmsnorm_backward(void* stream, float* dinp, float* dweight, const float* dout,
                      const float* inp, const W* weight, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const int rows = checked_int("rmsnorm_backward", "N", N);
  BoundStream s(stream);
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

template void rmsnorm_forward<float, float>(void*, float*, float*, const float*, const float*,
                                            int64_t, int64_t, float);
template void rmsnorm_forward<float, uint16_t>(void*, float*, float*, const float*, const uint16_t*,
                                               int64_t, int64_t, float);
template void rmsnorm_forward<uint16_t, float>(void*, uint16_t*, float*, const float*, const float*,
                                               int64_t, int64_t, float);
template void rmsnorm_forward<uint16_t, uint16_t>(void*, uint16_t*, float*, const float*,
                                                  const uint16_t*, int64_t, int64_t, float);
template void rmsnorm_backward<float>(void*, float*, float*, const float*, const float*,
                                      const float*, const float*, int64_t, int64_t);
template void rmsnorm_backward<uint16_t>(void*, float*, float*, const float*, const float*,
                                         const uint16_t*, const float*, int64_t, int64_t);

}  // namespace fanout::ops::cuda
