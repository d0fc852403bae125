#include "ops/cpu/attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include <tbb/enumerable_thread_specific.h>

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

namespace fanout::ops::cpu {

// Note [Tiled causal attention]
// FlashAttention's schedule on one core. One task per (batch, kv head) copies K and
// V of that head once into fp32 scratch (from float or bf16 storage), D padded with
// zeros to a multiple of kTileN, and runs the group's query heads against them. Per
// block of kBq queries the blocks of kBk keys run in order with an online softmax
// (running max m and sum l per query, the output rescaled by exp(m_old - m_new)
// when the max grows); key blocks past the block's last query are never touched and
// only blocks on the diagonal are masked. The score tile is kept transposed, S^T
// (keys, queries) = K_blk Q_blk^T, so the per-query statistics (max, sum, lse,
// delta) run along contiguous query columns and vectorise like everything else.
// Backward recomputes P = exp(S - lse) with the same blocking, dS = P o (dP - delta),
// delta_i = dout_i . out_i, and accumulates dq, dk, dv in fp32 scratch; dk and dv sum
// over the group's heads, then everything is stored once in the storage type.
// Every product is gemm_tile, a 4 x 32 register-blocked loop nest that GCC
// vectorises in each target clone (FANOUT_VECTOR_CLONES); the scale D^-1/2 is
// folded into the fp32 copies of q. Padded queries get lse = +inf (P = 0) and
// dout = 0 in backward, so they add nothing to dk, dv; padded keys lie past every
// real query and are masked.

namespace {

constexpr int64_t kBq = 32;     // queries per block: the columns of a score tile
constexpr int64_t kBk = 32;     // keys per block: its rows
constexpr int64_t kTileM = 4;   // gemm_tile register block: rows
constexpr int64_t kTileN = 32;  // and columns (2 AVX-512 or 4 AVX2 vectors)
constexpr int64_t kPadT = std::lcm(kBq, kBk);
static_assert(kBq % kTileN == 0 && kBq % kTileM == 0 && kBk % kTileM == 0);

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// C (M, N) = [C +] sum_k A(m, k) B(k, :) with A(m, k) = A[m sa + k sk] (row-major,
// or transposed with sa = 1) and B (K, N) row-major. M % kTileM == 0, N % kTileN == 0.
[[gnu::always_inline]] inline void gemm_tile(float* __restrict C, int64_t ldc,
                                             const float* __restrict A, int64_t sa, int64_t sk,
                                             const float* __restrict B, int64_t ldb, int64_t M,
                                             int64_t N, int64_t K, bool accumulate) {
  for (int64_t m0 = 0; m0 < M; m0 += kTileM)
    for (int64_t n0 = 0; n0 < N; n0 += kTileN) {
      float acc[kTileM][kTileN];
      for (int64_t mm = 0; mm < kTileM; ++mm)
        for (int64_t n = 0; n < kTileN; ++n)
          acc[mm][n] = accumulate ? C[(m0 + mm) * ldc + n0 + n] : 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const float* b = B + k * ldb + n0;
#pragma GCC unroll 4
        for (int64_t mm = 0; mm < kTileM; ++mm) {
          const float a = A[(m0 + mm) * sa + k * sk];
          for (int64_t n = 0; n < kTileN; ++n) acc[mm][n] += a * b[n];
        }
      }
      for (int64_t mm = 0; mm < kTileM; ++mm)
        for (int64_t n = 0; n < kTileN; ++n) C[(m0 + mm) * ldc + n0 + n] = acc[mm][n];
    }
}

// One query head against the fp32 copies of its kv head.
// O (Tq_pad, Dp) and lse (Tq) from QT (Tq_pad / kBq blocks of (Dp, kBq), pre-scaled),
// K and V (Tk_pad, Dp). ST is (kBk, kBq) scratch.
FANOUT_VECTOR_CLONES void forward_head(float* O, float* lse, const float* QT, const float* K,
                                       const float* V, int64_t Tq, int64_t Tk, int64_t Dp,
                                       float* ST) {
  const int64_t off = Tk - Tq;  // query i sits at position off + i
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t i0 = 0; i0 < Tq; i0 += kBq) {
    const int64_t rows = std::min(kBq, Tq - i0);
    float m[kBq], l[kBq], m_new[kBq], alpha[kBq];
    std::fill(m, m + kBq, -inf);
    std::fill(l, l + kBq, 0.0f);
    float* Ob = O + i0 * Dp;  // written by the first key block, then rescaled and added to
    const int64_t blocks = (off + i0 + rows - 1) / kBk + 1;  // the rest is masked
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int64_t j0 = kb * kBk;
      gemm_tile(ST, kBq, K + j0 * Dp, Dp, 1, QT + i0 * Dp, kBq, kBk, kBq, Dp, false);
      if (j0 + kBk - 1 > off + i0) {  // on the diagonal: keys past the query are -inf
        for (int64_t j = 0; j < kBk; ++j) {
          const int64_t first = j0 + j - off - i0;  // the first query that sees key j0 + j
          for (int64_t r = 0; r < kBq; ++r) ST[j * kBq + r] = r < first ? -inf : ST[j * kBq + r];
        }
      }
      // Key 0 is in block 0 for every query, so m_new is finite from there on.
      std::copy(m, m + kBq, m_new);
      for (int64_t j = 0; j < kBk; ++j)
        for (int64_t r = 0; r < kBq; ++r) {
          // By value: std::max returns a reference, and that select stays scalar.
          const float x = ST[j * kBq + r], y = m_new[r];
          m_new[r] = x > y ? x : y;
        }
      for (int64_t r = 0; r < kBq; ++r) {
        alpha[r] = exp_vec(m[r] - m_new[r]);  // 0 in the first block
        l[r] *= alpha[r];
        m[r] = m_new[r];
      }
      for (int64_t j = 0; j < kBk; ++j)
        for (int64_t r = 0; r < kBq; ++r) {
          const float p = exp_vec(ST[j * kBq + r] - m_new[r]);
          ST[j * kBq + r] = p;
          l[r] += p;
        }
      if (kb > 0)
        for (int64_t r = 0; r < kBq; ++r)
          for (int64_t d = 0; d < Dp; ++d) Ob[r * Dp + d] *= alpha[r];
      gemm_tile(Ob, Dp, ST, 1, kBq, V + j0 * Dp, Dp, kBq, Dp, kBk, kb > 0);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = 1.0f / l[r];
      for (int64_t d = 0; d < Dp; ++d) Ob[r * Dp + d] *= inv;
      lse[i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

// One key's row of the transposed tiles: p = exp(s - lse) (0 for queries r < first,
// which the causal mask hides from this key), ds = p (dp - delta).
[[gnu::always_inline]] inline void probs_and_grads(float* __restrict p, float* __restrict ds,
                                                   const float* __restrict lse,
                                                   const float* __restrict delta, int64_t first) {
  for (int64_t r = 0; r < kBq; ++r) {
    const float e = exp_vec(p[r] - lse[r]);
    const int32_t keep = r < first ? 0 : -1;  // an integer mask: float selects stay scalar
    const float pr = std::bit_cast<float>(std::bit_cast<int32_t>(e) & keep);
    p[r] = pr;
    ds[r] = pr * (ds[r] - delta[r]);
  }
}

// One query head's gradients (T == Tq == Tk), written to dQ (T_pad, Dp) and added onto
// its kv head's dK, dV (T_pad, Dp). Q (T_pad, Dp) is pre-scaled, so S = Q K^T,
// dK += dS^T Q, and dQ needs the scale applied by the caller. QT and dOT are the
// transposes of Q and dO per query block (Dp, kBq); K, V, dO (T_pad, Dp) row-major;
// L (T_pad) lse, +inf past T; delta (T_pad), 0 past T. PT, dST are (kBk, kBq) scratch.
FANOUT_VECTOR_CLONES void backward_head(float* dQ, float* dK, float* dV, const float* Q,
                                        const float* QT, const float* dO, const float* dOT,
                                        const float* K, const float* V, const float* L,
                                        const float* delta, int64_t T, int64_t Dp, float* PT,
                                        float* dST) {
  for (int64_t i0 = 0; i0 < T; i0 += kBq) {
    const int64_t rows = std::min(kBq, T - i0);
    const int64_t blocks = (i0 + rows - 1) / kBk + 1;
    const float* Lb = L + i0;
    const float* deltab = delta + i0;
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int64_t j0 = kb * kBk;
      gemm_tile(PT, kBq, K + j0 * Dp, Dp, 1, QT + i0 * Dp, kBq, kBk, kBq, Dp, false);
      gemm_tile(dST, kBq, V + j0 * Dp, Dp, 1, dOT + i0 * Dp, kBq, kBk, kBq, Dp, false);
      const bool diagonal = j0 + kBk - 1 > i0;
      for (int64_t j = 0; j < kBk; ++j) {
        const int64_t first = diagonal ? j0 + j - i0 : 0;  // the first query seeing key j0 + j
        probs_and_grads(PT + j * kBq, dST + j * kBq, Lb, deltab, first);
      }
      gemm_tile(dV + j0 * Dp, Dp, PT, kBq, 1, dO + i0 * Dp, Dp, kBk, Dp, kBq, true);
      gemm_tile(dK + j0 * Dp, Dp, dST, kBq, 1, Q + i0 * Dp, Dp, kBk, Dp, kBq, true);
      gemm_tile(dQ + i0 * Dp, Dp, dST, 1, kBq, K + j0 * Dp, Dp, kBq, Dp, kBk, kb > 0);
    }
  }
}

// delta[i] = a_i . b_i over rows of (n, Dp), Dp % kTileN == 0, in lanes so it vectorises.
FANOUT_VECTOR_CLONES void row_dots(float* delta, const float* a, const float* b, int64_t n,
                                   int64_t Dp) {
  for (int64_t i = 0; i < n; ++i) {
    float t[kTileN] = {};
    for (int64_t c = 0; c < Dp; c += kTileN)
      for (int64_t l = 0; l < kTileN; ++l) t[l] += a[i * Dp + c + l] * b[i * Dp + c + l];
    for (int64_t w = kTileN / 2; w >= 1; w /= 2)
      for (int64_t l = 0; l < w; ++l) t[l] += t[l + w];
    delta[i] = t[0];
  }
}

// ---

// Row conversions between storage and fp32, cloned like the kernels.
FANOUT_VECTOR_CLONES void load_row(float* __restrict dst, const float* __restrict src, int64_t n,
                                   float scale) {
  for (int64_t c = 0; c < n; ++c) dst[c] = src[c] * scale;
}

FANOUT_VECTOR_CLONES void load_row(float* __restrict dst, const bf16* __restrict src, int64_t n,
                                   float scale) {
  for (int64_t c = 0; c < n; ++c) dst[c] = load(src[c]) * scale;
}

FANOUT_VECTOR_CLONES void store_row(float* __restrict dst, const float* __restrict src, int64_t n,
                                    float scale) {
  for (int64_t c = 0; c < n; ++c) dst[c] = src[c] * scale;
}

FANOUT_VECTOR_CLONES void store_row(bf16* __restrict dst, const float* __restrict src, int64_t n,
                                    float scale) {
  for (int64_t c = 0; c < n; ++c) store(dst[c], src[c] * scale);
}

// Rows [0, n) of a strided (n, D) head view into dst (n_pad, Dp) fp32, times scale;
// the padding is zero.
template <typename X>
void load_rows(float* dst, const X* src, int64_t ld, int64_t n, int64_t n_pad, int64_t D,
               int64_t Dp, float scale = 1.0f) {
  for (int64_t i = 0; i < n; ++i) {
    load_row(dst + i * Dp, src + i * ld, D, scale);
    std::fill(dst + i * Dp + D, dst + (i + 1) * Dp, 0.0f);
  }
  std::fill(dst + n * Dp, dst + n_pad * Dp, 0.0f);
}

// dst (n_pad / kBq blocks of (Dp, kBq)) = src (n_pad, Dp) transposed per query block.
FANOUT_VECTOR_CLONES void transpose_blocks(float* __restrict dst, const float* __restrict src,
                                           int64_t n_pad, int64_t Dp) {
  for (int64_t i0 = 0; i0 < n_pad; i0 += kBq) {
    float* blk = dst + i0 * Dp;
    for (int64_t c = 0; c < Dp; ++c)
      for (int64_t r = 0; r < kBq; ++r) blk[c * kBq + r] = src[(i0 + r) * Dp + c];
  }
}

template <typename X>
void store_rows(X* dst, const float* src, int64_t ld, int64_t n, int64_t D, int64_t Dp,
                float scale = 1.0f) {
  for (int64_t i = 0; i < n; ++i) store_row(dst + i * ld, src + i * Dp, D, scale);
}

// fp32 scratch per worker thread, reused across its tasks.
using Scratch = tbb::enumerable_thread_specific<std::vector<float>>;

}  // namespace

// ---

template <typename X>
void attention_forward_tiled(X* out, float* lse, const X* q, const X* k, const X* v, int64_t B,
                             int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D) {
  if constexpr (std::is_same_v<X, bf16>)
    if (attention_bf16_dot_enabled())
      return attention_forward_bf16dot(out, lse, q, k, v, B, Tq, Tk, H, KV, D);
  const int64_t group = H / KV;  // query heads per kv head
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t ldq = H * D, ldk = KV * D;
  const int64_t Dp = round_up(D, kTileN), Tq_pad = round_up(Tq, kPadT),
                Tk_pad = round_up(Tk, kPadT);
  Scratch scratch;
  parallel_for_index(int64_t{0}, B * KV, [&](int64_t task) {
    const int64_t b = task / KV, kh = task % KV;
    std::vector<float>& buf = scratch.local();
    buf.resize(2 * Tk_pad * Dp + 2 * Tq_pad * Dp + kBk * kBq);
    float* Kf = buf.data();                      // (Tk_pad, Dp)
    float* Vf = Kf + Tk_pad * Dp;                // (Tk_pad, Dp)
    float* QT = Vf + Tk_pad * Dp;                // (Tq_pad / kBq) x (Dp, kBq), times scale
    float* Of = QT + Tq_pad * Dp;                // (Tq_pad, Dp)
    float* ST = Of + Tq_pad * Dp;                // (kBk, kBq)
    const int64_t koff = b * Tk * ldk + kh * D;  // kv head kh of batch b in (B, Tk, KV, D)
    load_rows(Kf, k + koff, ldk, Tk, Tk_pad, D, Dp);
    load_rows(Vf, v + koff, ldk, Tk, Tk_pad, D, Dp);
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const int64_t off = b * Tq * ldq + h * D;               // head h of batch b in (B, Tq, H, D)
      load_rows(Of, q + off, ldq, Tq, Tq_pad, D, Dp, scale);  // Of is free until the kernel
      transpose_blocks(QT, Of, Tq_pad, Dp);
      forward_head(Of, lse + (b * H + h) * Tq, QT, Kf, Vf, Tq, Tk, Dp, ST);
      store_rows(out + off, Of, ldq, Tq, D, Dp);
    }
  });
}

template <typename X, typename G>
void attention_backward_tiled(X* dq, X* dk, X* dv, const G* dout, const X* q, const X* k,
                              const X* v, const X* out, const float* lse, int64_t B, int64_t T,
                              int64_t H, int64_t KV, int64_t D) {
  if constexpr (std::is_same_v<X, bf16>)
    if (attention_bf16_dot_enabled())
      return attention_backward_bf16dot(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KV, D);
  const int64_t group = H / KV;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t ldq = H * D, ldk = KV * D;
  const int64_t Dp = round_up(D, kTileN), Tp = round_up(T, kPadT);
  Scratch scratch;
  parallel_for_index(int64_t{0}, B * KV, [&](int64_t task) {
    const int64_t b = task / KV, kh = task % KV;
    std::vector<float>& buf = scratch.local();
    buf.resize(9 * Tp * Dp + 2 * Tp + 2 * kBk * kBq);
    float* Kf = buf.data();                     // (Tp, Dp)
    float* Vf = Kf + Tp * Dp;                   // (Tp, Dp)
    float* dKf = Vf + Tp * Dp;                  // (Tp, Dp), summed over the group
    float* dVf = dKf + Tp * Dp;                 // (Tp, Dp), summed over the group
    float* Qf = dVf + Tp * Dp;                  // (Tp, Dp), times scale
    float* QT = Qf + Tp * Dp;                   // (Tp / kBq) x (Dp, kBq), times scale
    float* dOf = QT + Tp * Dp;                  // (Tp, Dp)
    float* dOT = dOf + Tp * Dp;                 // (Tp / kBq) x (Dp, kBq)
    float* dQf = dOT + Tp * Dp;                 // (Tp, Dp); out first, for delta
    float* Lf = dQf + Tp * Dp;                  // (Tp) lse, +inf past T
    float* delta = Lf + Tp;                     // (Tp) dout . out, 0 past T
    float* PT = delta + Tp;                     // (kBk, kBq)
    float* dST = PT + kBk * kBq;                // (kBk, kBq)
    const int64_t koff = b * T * ldk + kh * D;  // kv head kh of batch b in (B, T, KV, D)
    load_rows(Kf, k + koff, ldk, T, Tp, D, Dp);
    load_rows(Vf, v + koff, ldk, T, Tp, D, Dp);
    std::fill(dKf, dKf + 2 * Tp * Dp, 0.0f);
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const int64_t off = b * T * ldq + h * D;  // head h of batch b in (B, T, H, D)
      load_rows(Qf, q + off, ldq, T, Tp, D, Dp, scale);
      transpose_blocks(QT, Qf, Tp, Dp);
      load_rows(dOf, dout + off, ldq, T, Tp, D, Dp);
      transpose_blocks(dOT, dOf, Tp, Dp);
      load_rows(dQf, out + off, ldq, T, Tp, D, Dp);
      row_dots(delta, dOf, dQf, Tp, Dp);  // 0 past T, where dout is 0
      std::copy(lse + (b * H + h) * T, lse + (b * H + h + 1) * T, Lf);
      std::fill(Lf + T, Lf + Tp, std::numeric_limits<float>::infinity());
      backward_head(dQf, dKf, dVf, Qf, QT, dOf, dOT, Kf, Vf, Lf, delta, T, Dp, PT, dST);
      store_rows(dq + off, dQf, ldq, T, D, Dp, scale);
    }
    store_rows(dk + koff, dKf, ldk, T, D, Dp);
    store_rows(dv + koff, dVf, ldk, T, D, Dp);
  });
}

template void attention_forward_tiled<float>(float*, float*, const float*, const float*,
                                             const float*, int64_t, int64_t, int64_t, int64_t,
                                             int64_t, int64_t);
template void attention_forward_tiled<bf16>(bf16*, float*, const bf16*, const bf16*, const bf16*,
                                            int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
#define FANOUT_ATTENTION_BACKWARD(X, G)                                                            \
  template void attention_backward_tiled<X, G>(X*, X*, X*, const G*, const X*, const X*, const X*, \
                                               const X*, const float*, int64_t, int64_t, int64_t,  \
                                               int64_t, int64_t);
FANOUT_ATTENTION_BACKWARD(float, float)
FANOUT_ATTENTION_BACKWARD(float, bf16)
FANOUT_ATTENTION_BACKWARD(bf16, float)
FANOUT_ATTENTION_BACKWARD(bf16, bf16)
#undef FANOUT_ATTENTION_BACKWARD

}  // namespace fanout::ops::cpu
