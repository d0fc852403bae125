// CUDA RMSNorm over an f32 or bf16 weight and forward output (fp32 math, one
// rounding per store). Forward: one block per row (a double sum through
// block_sum). Backward as ops/rmsnorm_plan.h plans it: one pass where rows are at
// most 1024 channels (a warp per row, 8 channels a load; each lane keeps its
// channels' dweight sums in double registers, each block writes one row of
// partials), else two (dinp a block per row, then dweight's partials over chunks of
// rows, blocks of 32 channels x 8 row lanes). The partials are added by 8 lanes per
// channel in a fixed order. Deterministic.

#include <algorithm>

#include "ops/cuda/common.cuh"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/rmsnorm.h"
#include "ops/rmsnorm_plan.h"

namespace fanout::ops::cuda {

namespace {

constexpr int kRowLanes = 8;  // dweight: row lanes per block (blockDim.y)

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

// One pass, dinp (N, C) += d/dinp and partial[block][c] = the block's sum over rows
// n of dy[n][c] x[n][c] rstd[n]: warp w takes rows begin + w, begin + w + 8, ...;
// lane l channels (l + 32 g) * 8 .. + 8 for g < G. x and dy are read again after
// the row's dot (from cache: the warp has just read them) to keep registers for
// the sums. C % 8 == 0, C <= 256 G, every pointer 16-byte aligned.
template <int G, typename W>
__global__ void rmsnorm_rows_grad_one_pass(float* dinp, double* partial, const float* dout,
                                           const float* inp, const W* weight, const float* rstd,
                                           int64_t N, int64_t C, int64_t rows_per_block) {
  __shared__ double block_dw[kWarp * kVec * G];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t begin = blockIdx.x * rows_per_block, end = min(N, begin + rows_per_block);
  double dw[G][kVec] = {};
  for (int64_t n = begin + warp; n < end; n += kRmsnormRowWarps) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    double dot = 0.0;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int64_t c = (lane + int64_t(g) * kWarp) * kVec;
      if (c >= C) continue;
      float xv[kVec], dyv[kVec], wv[kVec];
      load8(x + c, xv);
      load8(dy + c, dyv);
      load8(weight + c, wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) dot += static_cast<double>(wv[k]) * dyv[k] * xv[k];
    }
    dot = warp_sum(dot);
    const double r = rstd[n];
    const double kr = r * r * r * dot / C;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int64_t c = (lane + int64_t(g) * kWarp) * kVec;
      if (c >= C) continue;
      float xv[kVec], dyv[kVec], wv[kVec], dxv[kVec];
      load8(x + c, xv);
      load8(dy + c, dyv);
      load8(weight + c, wv);
      load8(dinp + n * C + c, dxv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        dxv[k] += static_cast<float>(r * wv[k] * dyv[k] - kr * xv[k]);
        dw[g][k] += static_cast<double>(dyv[k]) * xv[k] * r;
      }
      store8(dinp + n * C + c, dxv);
    }
  }
  // The warps' sums into the block's, warp 0 first.
  for (int w = 0; w < kRmsnormRowWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const int64_t c = (lane + int64_t(g) * kWarp) * kVec + k;
          if (c < C) block_dw[c] = w == 0 ? dw[g][k] : block_dw[c] + dw[g][k];
        }
      }
    }
    __syncthreads();
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) partial[blockIdx.x * C + c] = block_dw[c];
}

// dweight[c] += sum over k of partial[k][c]. Block (32, kRowLanes) over channels
// [32 bx, 32 bx + 32): lane y adds rows y, y + 8, ... in order, then lane 0 the
// lanes' sums in order.
__global__ void rmsnorm_weight_grad_sum(float* dweight, const double* partial, int64_t C,
                                        int64_t rows) {
  __shared__ double lanes[kRowLanes][kWarp];
  const int64_t c = blockIdx.x * int64_t(kWarp) + threadIdx.x;
  double s = 0.0;
  if (c < C) {
#pragma unroll 4
    for (int64_t k = threadIdx.y; k < rows; k += kRowLanes) s += partial[k * C + c];
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double t = 0.0;
    for (int l = 0; l < kRowLanes; ++l) t += lanes[l][threadIdx.x];
    dweight[c] += static_cast<float>(t);
  }
}

template <typename W>
using OnePassKernel = void (*)(float*, double*, const float*, const float*, const W*, const float*,
                               int64_t, int64_t, int64_t);

// The one-pass kernel for `groups` channel groups a lane.
template <typename W>
OnePassKernel<W> one_pass_kernel(int groups) {
  switch (groups) {
    case 1:
      return rmsnorm_rows_grad_one_pass<1, W>;
    case 2:
      return rmsnorm_rows_grad_one_pass<2, W>;
    case 3:
      return rmsnorm_rows_grad_one_pass<3, W>;
    case 4:
      return rmsnorm_rows_grad_one_pass<4, W>;
    default:
      FANOUT_ASSERT(false, "rmsnorm_backward: one pass over ", groups, " channel groups");
      return nullptr;
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
  const char* op = "rmsnorm_backward";
  const bool aligned =
      is_aligned16(dinp) && is_aligned16(dout) && is_aligned16(inp) && is_aligned16(weight);
  const RmsnormGradPlan p = rmsnorm_grad_plan(N, C, aligned);
  BoundStream s(stream);
  StreamScratch partial(sizeof(double) * p.partials * C, s);
  if (p.one_pass) {
    const OnePassKernel<W> kernel = one_pass_kernel<W>(p.groups);
    kernel<<<checked_int(op, "row blocks", p.partials), kRmsnormRowWarps * kWarp, 0, s>>>(
        dinp, partial.as<double>(), dout, inp, weight, rstd, N, C, p.rows_per_block);
    FANOUT_CUDA_LAUNCH_CHECK();
  } else {
    rmsnorm_rows_grad<<<checked_int(op, "N", N), row_block(C), 0, s>>>(dinp, dout, inp, weight,
                                                                       rstd, C);
    FANOUT_CUDA_LAUNCH_CHECK();
    const dim3 grid(checked_int(op, "C / 32", (C + kWarp - 1) / kWarp),
                    checked_int(op, "row chunks", p.partials));
    rmsnorm_weight_grad_partial<<<grid, dim3(kWarp, kRowLanes), 0, s>>>(
        partial.as<double>(), dout, inp, rstd, N, C, p.rows_per_block);
    FANOUT_CUDA_LAUNCH_CHECK();
  }
  const int channel_blocks = checked_int(op, "C / 32", (C + kWarp - 1) / kWarp);
  rmsnorm_weight_grad_sum<<<channel_blocks, dim3(kWarp, kRowLanes), 0, s>>>(
      dweight, partial.as<double>(), C, p.partials);
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
