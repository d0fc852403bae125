// CUDA causal GQA attention: exact kernels written for clarity, not speed (no
// tensor cores, no split over keys), with f32 or bf16 storage and fp32 math.
// Note [CUDA attention layout].

#include <math_constants.h>

#include <algorithm>
#include <cmath>

#include "engine/core/bf16.cuh"
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
// output element is written by one warp: no atomics, deterministic. Storage is a
// template parameter (X for q, k, v, out and dq, dk, dv; G for dout: float or
// bf16 bits): rows widen to float as they are loaded into registers or shared
// tiles, and each output rounds once at its store, as the CPU's bf16 kernels do.

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
template <int R, typename T>
__device__ inline void load_lanes(float (&r)[R], const T* row, int64_t D, bool valid) {
#pragma unroll
  for (int x = 0; x < R; ++x) {
    const int64_t d = lane_id() + kWarp * x;
    r[x] = valid && d < D ? load(row, d) : 0.0f;
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

template <int R, typename T>
__device__ inline void store_lanes(T* row, const float (&r)[R], float mul, int64_t D) {
#pragma unroll
  for (int x = 0; x < R; ++x) {
    const int64_t d = lane_id() + kWarp * x;
    if (d < D) store(row, d, r[x] * mul);
  }
}

// dst (rows, D) <- rows of a strided tensor (row r at src + r * stride), by the block.
template <typename T>
__device__ inline void load_tile(float* dst, const T* src, int64_t stride, int64_t rows,
                                 int64_t D) {
  for (int64_t idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
    const int64_t r = idx / D, d = idx - r * D;
    dst[idx] = load(src, r * stride + d);
  }
}

// ---

// grid (B*H, ceil(Tq / kRowWarps)): warp w of block y owns query i = y*kRowWarps + w.
template <int R, typename X>
__global__ void attention_forward_online(X* out, float* lse, const X* q, const X* k, const X* v,
                                         Dims dm) {
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
template <typename X, typename G>
__global__ void attention_out_dot(float* Di, const G* dout, const X* out, Dims dm) {
  const int64_t rows = dm.B * dm.H * dm.Tq;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / kWarp;
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; row < rows;
       row += warps) {
    const int64_t b = row / (dm.H * dm.Tq), h = row / dm.Tq % dm.H, i = row % dm.Tq;
    const int64_t off = ((b * dm.Tq + i) * dm.H + h) * dm.D;
    float s = 0.0f;
    for (int64_t d = lane_id(); d < dm.D; d += kWarp) s += load(dout, off + d) * load(out, off + d);
    s = warp_sum(s);
    if (lane_id() == 0) Di[row] = s;
  }
}

// grid (B*H, ceil(T / kRowWarps)): warp w of block y owns query i; tiles of keys.
template <int R, typename X, typename G>
__global__ void attention_backward_dq(X* dq, const G* dout, const X* q, const X* k, const X* v,
                                      const float* lse, const float* Di, Dims dm) {
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
template <int R, typename X, typename G>
__global__ void attention_backward_dkdv(X* dk, X* dv, const G* dout, const X* q, const X* k,
                                        const X* v, const float* lse, const float* Di, Dims dm) {
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

Dims make_dims(int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D) {
  Dims dm{B, Tq, Tk, H, KV, D, tile_rows(D), 0.0f};
  dm.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));  // as the CPU rounds it
  return dm;
}

// One launch per kernel, the lane layout R picked from regs (lane_registers).
template <typename X>
void forward_typed(cudaStream_t s, X* out, float* lse, const X* q, const X* k, const X* v,
                   const Dims& dm, int regs) {
  const size_t smem = sizeof(float) * 2 * dm.tile * dm.D;
  const dim3 grid = row_grid("attention_forward", dm.B * dm.H, dm.Tq);
  auto launch = [&](auto kernel) {
    kernel<<<grid, kRowWarps * kWarp, smem, s>>>(out, lse, q, k, v, dm);
    FANOUT_CUDA_LAUNCH_CHECK();
  };
  switch (regs) {
    case 1:
      return launch(attention_forward_online<1, X>);
    case 2:
      return launch(attention_forward_online<2, X>);
    case 4:
      return launch(attention_forward_online<4, X>);
    default:
      return launch(attention_forward_online<8, X>);
  }
}

template <typename X, typename G>
void backward_typed(cudaStream_t s, X* dq, X* dk, X* dv, const G* dout, const X* q, const X* k,
                    const X* v, const X* out, const float* lse, const Dims& dm, int regs) {
  const char* op = "attention_backward";
  StreamScratch scratch(sizeof(float) * dm.B * dm.H * dm.Tq, s);
  const float* Di = scratch.as<float>();
  attention_out_dot<X, G>
      <<<grid_for(dm.B * dm.H * dm.Tq * kWarp), kBlock, 0, s>>>(scratch.as<float>(), dout, out, dm);
  FANOUT_CUDA_LAUNCH_CHECK();
  const size_t smem_dq = sizeof(float) * 2 * dm.tile * dm.D;
  const size_t smem_kv = sizeof(float) * (2 * dm.tile * dm.D + 2 * dm.tile);
  const dim3 grid_dq = row_grid(op, dm.B * dm.H, dm.Tq),
             grid_kv = row_grid(op, dm.B * dm.KV, dm.Tq);
  auto launch = [&](auto dq_kernel, auto dkdv_kernel) {
    dq_kernel<<<grid_dq, kRowWarps * kWarp, smem_dq, s>>>(dq, dout, q, k, v, lse, Di, dm);
    FANOUT_CUDA_LAUNCH_CHECK();
    dkdv_kernel<<<grid_kv, kRowWarps * kWarp, smem_kv, s>>>(dk, dv, dout, q, k, v, lse, Di, dm);
    FANOUT_CUDA_LAUNCH_CHECK();
  };
  switch (regs) {
    case 1:
      return launch(attention_backward_dq<1, X, G>, attention_backward_dkdv<1, X, G>);
    case 2:
      return launch(attention_backward_dq<2, X, G>, attention_backward_dkdv<2, X, G>);
    case 4:
      return launch(attention_backward_dq<4, X, G>, attention_backward_dkdv<4, X, G>);
    default:
      return launch(attention_backward_dq<8, X, G>, attention_backward_dkdv<8, X, G>);
  }
}

}  // namespace

// ---

void attention_forward_exact(void* stream, bool bf16, void* out, float* lse, const void* q,
                             const void* k, const void* v, int64_t B, int64_t Tq, int64_t Tk,
                             int64_t H, int64_t KV, int64_t D) {
  const int regs = lane_registers("attention_forward", D);
  if (B <= 0 || Tq <= 0) return;
  BoundStream s(stream);
  const Dims dm = make_dims(B, Tq, Tk, H, KV, D);
  if (bf16) {
    using X = uint16_t;
    forward_typed(s.get(), static_cast<X*>(out), lse, static_cast<const X*>(q),
                  static_cast<const X*>(k), static_cast<const X*>(v), dm, regs);
  } else {
    forward_typed(s.get(), static_cast<float*>(out), lse, static_cast<const float*>(q),
                  static_cast<const float*>(k), static_cast<const float*>(v), dm, regs);
  }
}

void attention_backward_exact(void* stream, bool bf16, bool dout_bf16, void* dq, void* dk, void* dv,
                              const void* dout, const void* q, const void* k, const void* v,
                              const void* out, const float* lse, int64_t B, int64_t T, int64_t H,
                              int64_t KV, int64_t D) {
  const int regs = lane_registers("attention_backward", D);
  if (B <= 0 || T <= 0) return;
  BoundStream s(stream);
  const Dims dm = make_dims(B, T, T, H, KV, D);
  // One instantiation per (X, G), as the CPU dispatcher's.
  auto run = [&]<typename X, typename G>() {
    backward_typed<X, G>(s.get(), static_cast<X*>(dq), static_cast<X*>(dk), static_cast<X*>(dv),
                         static_cast<const G*>(dout), static_cast<const X*>(q),
                         static_cast<const X*>(k), static_cast<const X*>(v),
                         static_cast<const X*>(out), lse, dm, regs);
  };
  if (bf16)
    dout_bf16 ? run.operator()<uint16_t, uint16_t>() : run.operator()<uint16_t, float>();
  else
    dout_bf16 ? run.operator()<float, uint16_t>() : run.operator()<float, float>();
}

}  // namespace fanout::ops::cuda
