// CUDA causal GQA attention: exact fp32 kernels written for clarity, not speed
// (no tensor cores, no split over keys). Note [CUDA attention layout].

#include <math_constants.h>

#include <algorithm>
#include <cmath>

#include "ops/cuda/attention.h"
#include "ops/cuda/common.cuh"

namespace fanout::ops::cuda {

// Note [CUDA attention layout]
// A warp owns one row: a query in forward and in backward's dq kernel, a key in
// backward's dk/dv kernel. Its lanes split the head dim, lane l holding elements
// l, l + 32, ... in R registers (R = 1, 2, 4 or 8: D <= 256). The kRowWarps warps
// of a block take consecutive rows of one (batch, head) and share tiles of the
// other side's rows, staged in shared memory. Each dot product of a (query, key)
// pair is a warp reduction. Forward keeps an online softmax (running max m and
// sum l, rescaled as the max grows) and saves lse = m + log l. Backward
// recomputes p = exp(s - lse) with D_i = rowsum(dO_i o O_i) from a first kernel:
// dq_i = scale sum_j p_ij (dO_i.v_j - D_i) k_j over keys j <= i, and for key j
// of kv head kh, over the query heads h of its group and queries i >= j,
// dv_j = sum p_ij dO_i and dk_j = scale sum p_ij (dO_i.v_j - D_i) q_i. Every
// output element is written by one warp: no atomics, deterministic.

namespace {

constexpr int kRowWarps = 8;  // rows (warps) per block
constexpr int kMaxD = 256;

struct Dims {
  int64_t B, Tq, Tk, H, KV, D;
  int tile;     // rows per shared-memory tile of the other side
  float scale;  // D^-0.5
};

// Shared tiles hold 2 * tile * D floats: at most 32 KB, under the 48 KB default.
int tile_rows(int64_t D) {
  return D <= 128 ? 32 : 16;
}

__device__ inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

__device__ inline int lane_id() {
  return static_cast<int>(threadIdx.x % kWarp);
}

// r[x] = row[lane + 32 x] (0 past D or when !valid).
template <int R>
__device__ inline void load_lanes(float (&r)[R], const float* row, int64_t D, bool valid) {
#pragma unroll
  for (int x = 0; x < R; ++x) {
    const int64_t d = lane_id() + kWarp * x;
    r[x] = valid && d < D ? row[d] : 0.0f;
  }
}

// sum_d a[d] row[d], a held in lanes, row in shared memory; on every lane.
template <int R>
__device__ inline float dot_lanes(const float (&a)[R], const float* row, int64_t D) {
  float s = 0.0f;
#pragma unroll
  for (int x = 0; x < R; ++x) {
    const int64_t d = lane_id() + kWarp * x;
    if (d < D) s += a[x] * row[d];
  }
  return warp_sum(s);
}

// acc[x] = acc[x] * keep + w * row[lane + 32 x].
template <int R>
__device__ inline void axpy_lanes(float (&acc)[R], float keep, float w, const float* row,
                                  int64_t D) {
#pragma unroll
  for (int x = 0; x < R; ++x) {
    const int64_t d = lane_id() + kWarp * x;
    if (d < D) acc[x] = acc[x] * keep + w * row[d];
  }
}

template <int R>
__device__ inline void store_lanes(float* row, const float (&r)[R], float mul, int64_t D) {
#pragma unroll
  for (int x = 0; x < R; ++x) {
    const int64_t d = lane_id() + kWarp * x;
    if (d < D) row[d] = r[x] * mul;
  }
}

// dst (rows, D) <- rows of a strided tensor (row r at src + r * stride), by the block.
__device__ inline void load_tile(float* dst, const float* src, int64_t stride, int64_t rows,
                                 int64_t D) {
  for (int64_t idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
    const int64_t r = idx / D, d = idx - r * D;
    dst[idx] = src[r * stride + d];
  }
}

// ---

// grid (B*H, ceil(Tq / kRowWarps)): warp w of block y owns query i = y*kRowWarps + w.
template <int R>
__global__ void attention_forward_online(float* out, float* lse, const float* q, const float* k,
                                         const float* v, Dims dm) {
  extern __shared__ float smem[];
  const int64_t D = dm.D;
  float* ks = smem;  // (tile, D)
  float* vs = smem + dm.tile * D;
  const int64_t b = blockIdx.x / dm.H, h = blockIdx.x % dm.H, kh = h / (dm.H / dm.KV);
  const int64_t i0 = int64_t(blockIdx.y) * kRowWarps, i = i0 + threadIdx.x / kWarp;
  const bool active = i < dm.Tq;
  const int64_t offset = dm.Tk - dm.Tq;  // query i sits at position offset + i
  const int64_t block_last = offset + min64(i0 + kRowWarps, dm.Tq) - 1;
  const int64_t qoff = ((b * dm.Tq + i) * dm.H + h) * D;
  float qr[R], o[R];
  load_lanes(qr, q + qoff, D, active);
#pragma unroll
  for (int x = 0; x < R; ++x) o[x] = 0.0f;
  float m = -CUDART_INF_F, l = 0.0f;
  for (int64_t j0 = 0; j0 <= block_last; j0 += dm.tile) {
    const int64_t rows = min64(dm.tile, dm.Tk - j0);
    const int64_t base = ((b * dm.Tk + j0) * dm.KV + kh) * D;
    __syncthreads();  // the previous tile is consumed
    load_tile(ks, k + base, dm.KV * D, rows, D);
    load_tile(vs, v + base, dm.KV * D, rows, D);
    __syncthreads();
    // Keys j0 .. offset + i of this tile; warp-uniform, so the shuffles are safe.
    const int64_t n = active ? min64(rows, offset + i - j0 + 1) : 0;
    for (int64_t jj = 0; jj < n; ++jj) {
      const float s = dot_lanes(qr, ks + jj * D, D) * dm.scale;
      const float m_new = fmaxf(m, s);
      const float keep = expf(m - m_new);  // 0 on the first key (m = -inf)
      const float p = expf(s - m_new);
      l = l * keep + p;
      axpy_lanes(o, keep, p, vs + jj * D, D);
      m = m_new;
    }
  }
  if (!active) return;
  store_lanes(out + qoff, o, 1.0f / l, D);
  if (lane_id() == 0) lse[(b * dm.H + h) * dm.Tq + i] = m + logf(l);
}

// Di (B, H, T) = rowsum(dout o out), a warp per row.
__global__ void attention_out_dot(float* Di, const float* dout, const float* out, Dims dm) {
  const int64_t rows = dm.B * dm.H * dm.Tq;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / kWarp;
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; row < rows;
       row += warps) {
    const int64_t b = row / (dm.H * dm.Tq), h = row / dm.Tq % dm.H, i = row % dm.Tq;
    const int64_t off = ((b * dm.Tq + i) * dm.H + h) * dm.D;
    float s = 0.0f;
    for (int64_t d = lane_id(); d < dm.D; d += kWarp) s += dout[off + d] * out[off + d];
    s = warp_sum(s);
    if (lane_id() == 0) Di[row] = s;
  }
}

// grid (B*H, ceil(T / kRowWarps)): warp w of block y owns query i; tiles of keys.
template <int R>
__global__ void attention_backward_dq(float* dq, const float* dout, const float* q, const float* k,
                                      const float* v, const float* lse, const float* Di, Dims dm) {
  extern __shared__ float smem[];
  const int64_t D = dm.D, T = dm.Tq;
  float* ks = smem;  // (tile, D)
  float* vs = smem + dm.tile * D;
  const int64_t b = blockIdx.x / dm.H, h = blockIdx.x % dm.H, kh = h / (dm.H / dm.KV);
  const int64_t i0 = int64_t(blockIdx.y) * kRowWarps, i = i0 + threadIdx.x / kWarp;
  const bool active = i < T;
  const int64_t block_last = min64(i0 + kRowWarps, T) - 1;
  const int64_t qoff = ((b * T + i) * dm.H + h) * D;
  const int64_t row = (b * dm.H + h) * T + i;  // in (B, H, T)
  float qr[R], dor[R], acc[R];
  load_lanes(qr, q + qoff, D, active);
  load_lanes(dor, dout + qoff, D, active);
#pragma unroll
  for (int x = 0; x < R; ++x) acc[x] = 0.0f;
  const float L = active ? lse[row] : 0.0f;
  const float Dr = active ? Di[row] : 0.0f;
  for (int64_t j0 = 0; j0 <= block_last; j0 += dm.tile) {
    const int64_t rows = min64(dm.tile, T - j0);
    const int64_t base = ((b * T + j0) * dm.KV + kh) * D;
    __syncthreads();
    load_tile(ks, k + base, dm.KV * D, rows, D);
    load_tile(vs, v + base, dm.KV * D, rows, D);
    __syncthreads();
    const int64_t n = active ? min64(rows, i - j0 + 1) : 0;
    for (int64_t jj = 0; jj < n; ++jj) {
      const float p = expf(dot_lanes(qr, ks + jj * D, D) * dm.scale - L);
      const float ds = p * (dot_lanes(dor, vs + jj * D, D) - Dr);
      axpy_lanes(acc, 1.0f, ds, ks + jj * D, D);
    }
  }
  if (active) store_lanes(dq + qoff, acc, dm.scale, D);
}

// grid (B*KV, ceil(T / kRowWarps)): warp w of block y owns key j of kv head kh;
// tiles of queries i >= j of every query head of the group.
template <int R>
__global__ void attention_backward_dkdv(float* dk, float* dv, const float* dout, const float* q,
                                        const float* k, const float* v, const float* lse,
                                        const float* Di, Dims dm) {
  extern __shared__ float smem[];
  const int64_t D = dm.D, T = dm.Tq, group = dm.H / dm.KV;
  float* qs = smem;                 // (tile, D)
  float* dos = smem + dm.tile * D;  // (tile, D)
  float* ls = dos + dm.tile * D;    // (tile) lse
  float* dis = ls + dm.tile;        // (tile) Di
  const int64_t b = blockIdx.x / dm.KV, kh = blockIdx.x % dm.KV;
  const int64_t j0 = int64_t(blockIdx.y) * kRowWarps, j = j0 + threadIdx.x / kWarp;
  const bool active = j < T;
  const int64_t koff = ((b * T + j) * dm.KV + kh) * D;
  float kr[R], vr[R], dka[R], dva[R];
  load_lanes(kr, k + koff, D, active);
  load_lanes(vr, v + koff, D, active);
#pragma unroll
  for (int x = 0; x < R; ++x) dka[x] = dva[x] = 0.0f;
  const int64_t first = j0 / dm.tile * dm.tile;  // the tile holding query j0
  for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
    for (int64_t i0 = first; i0 < T; i0 += dm.tile) {
      const int64_t rows = min64(dm.tile, T - i0);
      const int64_t base = ((b * T + i0) * dm.H + h) * D;
      const int64_t stat = (b * dm.H + h) * T + i0;
      __syncthreads();
      load_tile(qs, q + base, dm.H * D, rows, D);
      load_tile(dos, dout + base, dm.H * D, rows, D);
      for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        ls[r] = lse[stat + r];
        dis[r] = Di[stat + r];
      }
      __syncthreads();
      // Queries i >= j of this tile; warp-uniform.
      const int64_t start = active ? (j > i0 ? j - i0 : 0) : rows;
      for (int64_t ii = start; ii < rows; ++ii) {
        const float p = expf(dot_lanes(kr, qs + ii * D, D) * dm.scale - ls[ii]);
        axpy_lanes(dva, 1.0f, p, dos + ii * D, D);
        const float ds = p * (dot_lanes(vr, dos + ii * D, D) - dis[ii]);
        axpy_lanes(dka, 1.0f, ds, qs + ii * D, D);
      }
    }
  }
  if (!active) return;
  store_lanes(dk + koff, dka, dm.scale, D);
  store_lanes(dv + koff, dva, 1.0f, D);
}

// ---

int lane_registers(const char* op, int64_t D) {
  FANOUT_CHECK(D <= kMaxD, op, ": head dim ", D, " exceeds the CUDA kernel's limit of ", kMaxD);
  return D <= 32 ? 1 : D <= 64 ? 2 : D <= 128 ? 4 : 8;
}

dim3 row_grid(const char* op, int64_t heads, int64_t rows) {
  const int64_t row_blocks = (rows + kRowWarps - 1) / kRowWarps;
  FANOUT_CHECK(row_blocks <= 65535, op, ": sequence length ", rows,
               " exceeds the CUDA kernel's grid limit");
  return dim3(static_cast<unsigned>(checked_int(op, "B * heads", heads)),
              static_cast<unsigned>(row_blocks));
}

template <int R>
void forward_launch(cudaStream_t s, float* out, float* lse, const float* q, const float* k,
                    const float* v, const Dims& dm) {
  const size_t smem = sizeof(float) * 2 * dm.tile * dm.D;
  attention_forward_online<R>
      <<<row_grid("attention_forward", dm.B * dm.H, dm.Tq), kRowWarps * kWarp, smem, s>>>(
          out, lse, q, k, v, dm);
  FANOUT_CUDA_LAUNCH_CHECK();
}

template <int R>
void backward_launch(cudaStream_t s, float* dq, float* dk, float* dv, const float* dout,
                     const float* q, const float* k, const float* v, const float* lse,
                     const float* Di, const Dims& dm) {
  const char* op = "attention_backward";
  const size_t smem_dq = sizeof(float) * 2 * dm.tile * dm.D;
  attention_backward_dq<R><<<row_grid(op, dm.B * dm.H, dm.Tq), kRowWarps * kWarp, smem_dq, s>>>(
      dq, dout, q, k, v, lse, Di, dm);
  FANOUT_CUDA_LAUNCH_CHECK();
  const size_t smem_kv = sizeof(float) * (2 * dm.tile * dm.D + 2 * dm.tile);
  attention_backward_dkdv<R><<<row_grid(op, dm.B * dm.KV, dm.Tq), kRowWarps * kWarp, smem_kv, s>>>(
      dk, dv, dout, q, k, v, lse, Di, dm);
  FANOUT_CUDA_LAUNCH_CHECK();
}

Dims make_dims(int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D) {
  Dims dm{B, Tq, Tk, H, KV, D, tile_rows(D), 0.0f};
  dm.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));  // as the CPU rounds it
  return dm;
}

}  // namespace

// ---

void attention_forward_f32(void* stream, float* out, float* lse, const float* q, const float* k,
                           const float* v, int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV,
                           int64_t D) {
  const char* op = "attention_forward";
  const int regs = lane_registers(op, D);
  if (B <= 0 || Tq <= 0) return;
  cudaStream_t s = stream_bind(stream);
  const Dims dm = make_dims(B, Tq, Tk, H, KV, D);
  switch (regs) {
    case 1:
      return forward_launch<1>(s, out, lse, q, k, v, dm);
    case 2:
      return forward_launch<2>(s, out, lse, q, k, v, dm);
    case 4:
      return forward_launch<4>(s, out, lse, q, k, v, dm);
    default:
      return forward_launch<8>(s, out, lse, q, k, v, dm);
  }
}

void attention_backward_f32(void* stream, float* dq, float* dk, float* dv, const float* dout,
                            const float* q, const float* k, const float* v, const float* out,
                            const float* lse, int64_t B, int64_t T, int64_t H, int64_t KV,
                            int64_t D) {
  const char* op = "attention_backward";
  const int regs = lane_registers(op, D);
  if (B <= 0 || T <= 0) return;
  cudaStream_t s = stream_bind(stream);
  const Dims dm = make_dims(B, T, T, H, KV, D);
  StreamScratch Di(sizeof(float) * B * H * T, s);
  attention_out_dot<<<grid_for(B * H * T * kWarp), kBlock, 0, s>>>(Di.as<float>(), dout, out, dm);
  FANOUT_CUDA_LAUNCH_CHECK();
  switch (regs) {
    case 1:
      return backward_launch<1>(s, dq, dk, dv, dout, q, k, v, lse, Di.as<float>(), dm);
    case 2:
      return backward_launch<2>(s, dq, dk, dv, dout, q, k, v, lse, Di.as<float>(), dm);
    case 4:
      return backward_launch<4>(s, dq, dk, dv, dout, q, k, v, lse, Di.as<float>(), dm);
    default:
      return backward_launch<8>(s, dq, dk, dv, dout, q, k, v, lse, Di.as<float>(), dm);
  }
}

}  // namespace fanout::ops::cuda
