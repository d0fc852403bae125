// The bf16-storage attention kernel on AVX512-BF16 (Note [bf16 dot attention]).

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <tbb/enumerable_thread_specific.h>

#include "engine/core/check.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(FANOUT_NO_TARGET_CLONES)
#define FANOUT_HAVE_BF16_DOT 1
#include <immintrin.h>
#define FANOUT_BF16_DOT_TARGET __attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw")))
#else
#define FANOUT_HAVE_BF16_DOT 0
#endif

namespace fanout::ops::cpu {

// Note [bf16 dot attention]
// With bf16 storage, the products of attention run on vdpbf16ps, which multiplies
// bf16 pairs exactly and adds them into fp32 lanes, at twice the fp32 FMA rate. The
// schedule is Note [Tiled causal attention]'s; only the operands change. vdpbf16ps
// reduces over adjacent pairs of 16-bit elements, so every B operand is stored with
// the reduction index interleaved in pairs (a "pair layout", (K / 2, N, 2)), and
// every A operand so that the pair (A(m, k), A(m, k + 1)) is one 32-bit word to
// broadcast. q, k, v (and dout when it is bf16) are copied bit for bit: S = Q K^T
// and dP = dO V^T are exact products summed in fp32 (the scale D^-1/2 is applied to
// the fp32 sum, not to q). P and dS are rounded to bf16 for P V, P^T dO, dS K and
// dS^T Q, as flash attention does in bf16; the softmax statistics (max, sum, lse),
// delta and every accumulator stay fp32. An f32 dout is rounded to bf16 for dO V^T
// and P^T dO (delta takes it unrounded). vdpbf16ps and vcvtne2ps2bf16 treat
// denormals as zero: P below 2^-126 counts as 0. The fp32 path of attention.cpp is
// the fallback where the CPU lacks AVX512-BF16, or with FANOUT_NO_BF16_DOT=1.

namespace {

std::atomic<bool>& dot_flag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("FANOUT_NO_BF16_DOT");
    return attention_bf16_dot_supported() && !(env != nullptr && std::strcmp(env, "1") == 0);
  }()};
  return flag;
}

}  // namespace

bool attention_bf16_dot_supported() {
#if FANOUT_HAVE_BF16_DOT
  static const bool supported = __builtin_cpu_supports("avx512bf16") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vl");
  return supported;
#else
  return false;
#endif
}

bool attention_bf16_dot_enabled() {
  return dot_flag().load(std::memory_order_relaxed);
}

bool set_attention_bf16_dot(bool on) {
  const bool was = attention_bf16_dot_enabled();
  dot_flag().store(on && attention_bf16_dot_supported(), std::memory_order_relaxed);
  return was;
}

#if FANOUT_HAVE_BF16_DOT

namespace {

constexpr int64_t kBq = 32;  // as attention.cpp: queries per block
constexpr int64_t kBk = 32;  // keys per block
constexpr int64_t kPad = 32;
constexpr int64_t kDpad = 32;  // Dp: a multiple of 32 columns (two 16-lane vectors)

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// A bf16 pair read as one word from uint16_t buffers: may_alias keeps that defined.
using Pair = uint32_t __attribute__((may_alias));

// C (M, N) = alpha sum_kp A(m, kp) . B(kp, n) [+ C rs(m)]: A(m, kp) the 32-bit word
// (a bf16 pair) A[m sa + kp sk], B in pair layout with ldb uint16 per kp row; rs, the
// old C's row scales, is 1 where null. M % MR == 0, N % (16 NV) == 0.
template <int MR, int NV>
FANOUT_BF16_DOT_TARGET inline void dot_tile(float* __restrict C, int64_t ldc,
                                            const Pair* __restrict A, int64_t sa, int64_t sk,
                                            const uint16_t* __restrict B, int64_t ldb, int64_t M,
                                            int64_t N, int64_t Kp, float alpha, bool accumulate,
                                            const float* rs = nullptr) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t m0 = 0; m0 < M; m0 += MR)
    for (int64_t n0 = 0; n0 < N; n0 += 16 * NV) {
      __m512 acc[MR][NV];
      for (int mm = 0; mm < MR; ++mm)
        for (int v = 0; v < NV; ++v) acc[mm][v] = _mm512_setzero_ps();
      for (int64_t kp = 0; kp < Kp; ++kp) {
        __m512i b[NV];
        for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_si512(B + kp * ldb + (n0 + 16 * v) * 2);
        for (int mm = 0; mm < MR; ++mm) {
          const __m512i a = _mm512_set1_epi32(static_cast<int>(A[(m0 + mm) * sa + kp * sk]));
          for (int v = 0; v < NV; ++v)
            acc[mm][v] = _mm512_dpbf16_ps(acc[mm][v], (__m512bh)a, (__m512bh)b[v]);
        }
      }
      for (int mm = 0; mm < MR; ++mm)
        for (int v = 0; v < NV; ++v) {
          float* c = C + (m0 + mm) * ldc + n0 + 16 * v;
          __m512 r = _mm512_mul_ps(acc[mm][v], va);
          if (accumulate)
            r = rs ? _mm512_fmadd_ps(_mm512_loadu_ps(c), _mm512_set1_ps(rs[m0 + mm]), r)
                   : _mm512_add_ps(r, _mm512_loadu_ps(c));
          _mm512_storeu_ps(c, r);
        }
    }
}

// Wide outputs (N = Dp columns): 4 x 64 when Dp allows, else 8 x 32; both keep 16
// accumulators in flight, enough to cover vdpbf16ps' latency.
FANOUT_BF16_DOT_TARGET inline void dot_wide(float* C, int64_t ldc, const Pair* A, int64_t sa,
                                            int64_t sk, const uint16_t* B, int64_t ldb, int64_t M,
                                            int64_t N, int64_t Kp, float alpha, bool accumulate,
                                            const float* rs = nullptr) {
  if (N % 64 == 0)
    dot_tile<4, 4>(C, ldc, A, sa, sk, B, ldb, M, N, Kp, alpha, accumulate, rs);
  else
    dot_tile<8, 2>(C, ldc, A, sa, sk, B, ldb, M, N, Kp, alpha, accumulate, rs);
}

// 32 fp32 values (lo, hi halves) rounded to 32 bf16 in order.
FANOUT_BF16_DOT_TARGET inline void store_row32(uint16_t* dst, const float* src) {
  const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 16), _mm512_loadu_ps(src));
  _mm512_storeu_si512(dst, (__m512i)r);
}

// Rows x, y of 32 fp32 values each into the pair layout: dst = x0 y0 x1 y1 ... x31 y31.
FANOUT_BF16_DOT_TARGET inline void store_pairs32(uint16_t* dst, const float* x, const float* y) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int h = 0; h < 2; ++h) {
    const __m512bh w =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(y + 16 * h), _mm512_loadu_ps(x + 16 * h));
    _mm512_storeu_si512(dst + 32 * h, _mm512_permutexvar_epi16(idx, (__m512i)w));
  }
}

// One query head. O (Tq_pad, Dp) fp32 and lse (Tq); Qp per query block (Dp / 2, kBq, 2);
// K16 (Tk_pad, Dp) row-major; Vp (Tk_pad / 2, Dp, 2). ST (kBk, kBq) fp32, Pp
// (kBk / 2, kBq, 2) scratch.
FANOUT_BF16_DOT_TARGET void forward_head(float* O, float* lse, const uint16_t* Qp,
                                         const uint16_t* K16, const uint16_t* Vp, int64_t Tq,
                                         int64_t Tk, int64_t Dp, float scale, float* ST,
                                         uint16_t* Pp) {
  const int64_t off = Tk - Tq;
  const float inf = std::numeric_limits<float>::infinity();
  const auto* K32 = reinterpret_cast<const Pair*>(K16);
  const auto* P32 = reinterpret_cast<const Pair*>(Pp);
  for (int64_t i0 = 0; i0 < Tq; i0 += kBq) {
    const int64_t rows = std::min(kBq, Tq - i0);
    float m[kBq], l[kBq], m_new[kBq], alpha[kBq];
    std::fill(m, m + kBq, -inf);
    std::fill(l, l + kBq, 0.0f);
    float* Ob = O + i0 * Dp;
    const int64_t blocks = (off + i0 + rows - 1) / kBk + 1;
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int64_t j0 = kb * kBk;
      dot_tile<8, 2>(ST, kBq, K32 + j0 * Dp / 2, Dp / 2, 1, Qp + i0 * Dp, 2 * kBq, kBk, kBq, Dp / 2,
                     scale, false);
      if (j0 + kBk - 1 > off + i0) {
        for (int64_t j = 0; j < kBk; ++j) {
          const int64_t first = j0 + j - off - i0;
          for (int64_t r = 0; r < kBq; ++r) ST[j * kBq + r] = r < first ? -inf : ST[j * kBq + r];
        }
      }
      std::copy(m, m + kBq, m_new);
      for (int64_t j = 0; j < kBk; ++j)
        for (int64_t r = 0; r < kBq; ++r) {
          const float x = ST[j * kBq + r], y = m_new[r];
          m_new[r] = x > y ? x : y;
        }
      for (int64_t r = 0; r < kBq; ++r) {
        alpha[r] = exp_vec(m[r] - m_new[r]);
        l[r] *= alpha[r];
        m[r] = m_new[r];
      }
      for (int64_t j = 0; j < kBk; ++j)
        for (int64_t r = 0; r < kBq; ++r) {
          const float p = exp_vec(ST[j * kBq + r] - m_new[r]);
          ST[j * kBq + r] = p;
          l[r] += p;  // the fp32 p: l normalises what P V sums, up to P's rounding
        }
      for (int64_t j = 0; j < kBk; j += 2)
        store_pairs32(Pp + j * kBq, ST + j * kBq, ST + (j + 1) * kBq);
      // O = O alpha + P V, the rescale fused into the product's store.
      dot_wide(Ob, Dp, P32, 1, kBq, Vp + j0 * Dp, 2 * Dp, kBq, Dp, kBk / 2, 1.0f, kb > 0, alpha);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = 1.0f / l[r];
      for (int64_t d = 0; d < Dp; ++d) Ob[r * Dp + d] *= inv;
      lse[i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

// One query head's gradients (T == Tq == Tk): dQ (T_pad, Dp) overwritten, dK, dV
// (T_pad, Dp) added onto, all fp32 and without the scale on dQ, dK (the caller's).
// Qp, dOp per query block (Dp / 2, kBq, 2); Qr, dOr (T_pad / 2, Dp, 2); K16, V16
// (T_pad, Dp) row-major, Kr (T_pad / 2, Dp, 2). L, delta as in attention.cpp.
// PT, dST (kBk, kBq) fp32; P16, dS16 (kBk, kBq) and dSp (kBk / 2, kBq, 2) bf16.
FANOUT_BF16_DOT_TARGET void backward_head(float* dQ, float* dK, float* dV, const uint16_t* Qp,
                                          const uint16_t* Qr, const uint16_t* dOp,
                                          const uint16_t* dOr, const uint16_t* K16,
                                          const uint16_t* Kr, const uint16_t* V16, const float* L,
                                          const float* delta, int64_t T, int64_t Dp, float scale,
                                          float* PT, float* dST, uint16_t* P16, uint16_t* dS16,
                                          uint16_t* dSp) {
  const auto* K32 = reinterpret_cast<const Pair*>(K16);
  const auto* V32 = reinterpret_cast<const Pair*>(V16);
  const auto* P32 = reinterpret_cast<const Pair*>(P16);
  const auto* dS32 = reinterpret_cast<const Pair*>(dS16);
  const auto* dSp32 = reinterpret_cast<const Pair*>(dSp);
  for (int64_t i0 = 0; i0 < T; i0 += kBq) {
    const int64_t rows = std::min(kBq, T - i0);
    const int64_t blocks = (i0 + rows - 1) / kBk + 1;
    const float* Lb = L + i0;
    const float* deltab = delta + i0;
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int64_t j0 = kb * kBk;
      dot_tile<8, 2>(PT, kBq, K32 + j0 * Dp / 2, Dp / 2, 1, Qp + i0 * Dp, 2 * kBq, kBk, kBq, Dp / 2,
                     scale, false);
      dot_tile<8, 2>(dST, kBq, V32 + j0 * Dp / 2, Dp / 2, 1, dOp + i0 * Dp, 2 * kBq, kBk, kBq,
                     Dp / 2, 1.0f, false);
      const bool diagonal = j0 + kBk - 1 > i0;
      for (int64_t j = 0; j < kBk; ++j) {
        const int64_t first = diagonal ? j0 + j - i0 : 0;
        float* p = PT + j * kBq;
        float* ds = dST + j * kBq;
        for (int64_t r = 0; r < kBq; ++r) {
          const float e = exp_vec(p[r] - Lb[r]);
          const int32_t keep = r < first ? 0 : -1;
          const float pr = std::bit_cast<float>(std::bit_cast<int32_t>(e) & keep);
          p[r] = pr;
          ds[r] = pr * (ds[r] - deltab[r]);
        }
        store_row32(P16 + j * kBq, p);
        store_row32(dS16 + j * kBq, ds);
      }
      for (int64_t j = 0; j < kBk; j += 2)
        store_pairs32(dSp + j * kBq, dST + j * kBq, dST + (j + 1) * kBq);
      dot_wide(dV + j0 * Dp, Dp, P32, kBq / 2, 1, dOr + i0 * Dp, 2 * Dp, kBk, Dp, kBq / 2, 1.0f,
               true);
      dot_wide(dK + j0 * Dp, Dp, dS32, kBq / 2, 1, Qr + i0 * Dp, 2 * Dp, kBk, Dp, kBq / 2, 1.0f,
               true);
      dot_wide(dQ + i0 * Dp, Dp, dSp32, 1, kBq, Kr + j0 * Dp, 2 * Dp, kBq, Dp, kBk / 2, 1.0f,
               kb > 0);
    }
  }
}

// ---

inline uint16_t bits_of(bf16 x) {
  return x.bits;
}
inline uint16_t bits_of(float x) {
  return float_to_bf16_branchless(x);
}

// Rows [0, n) of a strided (n, D) head view as bf16 bits into dst (n_pad, Dp); the
// padding is zero.
template <typename S>
FANOUT_BF16_DOT_TARGET void rows16(uint16_t* __restrict dst, const S* __restrict src, int64_t ld,
                                   int64_t n, int64_t n_pad, int64_t D, int64_t Dp) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < D; ++c) dst[i * Dp + c] = bits_of(src[i * ld + c]);
    std::fill(dst + i * Dp + D, dst + (i + 1) * Dp, uint16_t{0});
  }
  std::fill(dst + n * Dp, dst + n_pad * Dp, uint16_t{0});
}

// dst (n_pad / 2, Dp, 2) from src (n_pad, Dp): rows interleaved in pairs.
FANOUT_BF16_DOT_TARGET void row_pairs(uint16_t* __restrict dst, const uint16_t* __restrict src,
                                      int64_t n_pad, int64_t Dp) {
  for (int64_t i = 0; i < n_pad; i += 2)
    for (int64_t c = 0; c < Dp; ++c) {
      dst[i * Dp + 2 * c] = src[i * Dp + c];
      dst[i * Dp + 2 * c + 1] = src[(i + 1) * Dp + c];
    }
}

// dst per block of kBq rows (Dp / 2, kBq, 2) from src (n_pad, Dp): the column pairs
// transposed as 32-bit words.
FANOUT_BF16_DOT_TARGET void block_pairs(uint16_t* __restrict dst, const uint16_t* __restrict src,
                                        int64_t n_pad, int64_t Dp) {
  // Per 16 rows, one gather of the column pair c from each row (stride Dp / 2 words).
  const __m512i rows =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int>(Dp / 2)));
  // The masked gather: the plain one trips GCC 12's -Wmaybe-uninitialized in its header.
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t i0 = 0; i0 < n_pad; i0 += kBq)
    for (int64_t h = 0; h < kBq; h += 16) {
      const uint16_t* base = src + (i0 + h) * Dp;
      for (int64_t c = 0; c < Dp / 2; ++c)
        _mm512_storeu_si512(dst + i0 * Dp + (c * kBq + h) * 2,
                            _mm512_mask_i32gather_epi32(zero, 0xffff, rows, base + 2 * c, 4));
    }
}

template <typename S>
FANOUT_BF16_DOT_TARGET void rows32(float* __restrict dst, const S* __restrict src, int64_t ld,
                                   int64_t n, int64_t n_pad, int64_t D, int64_t Dp) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < D; ++c) dst[i * Dp + c] = load(src[i * ld + c]);
    std::fill(dst + i * Dp + D, dst + (i + 1) * Dp, 0.0f);
  }
  std::fill(dst + n * Dp, dst + n_pad * Dp, 0.0f);
}

// delta[i] = a_i . b_i over rows of (n, Dp), Dp % 32 == 0, summed in 32 lanes.
FANOUT_BF16_DOT_TARGET void row_dots(float* delta, const float* a, const float* b, int64_t n,
                                     int64_t Dp) {
  for (int64_t i = 0; i < n; ++i) {
    float t[32] = {};
    for (int64_t c = 0; c < Dp; c += 32)
      for (int64_t l = 0; l < 32; ++l) t[l] += a[i * Dp + c + l] * b[i * Dp + c + l];
    for (int64_t w = 16; w >= 1; w /= 2)
      for (int64_t l = 0; l < w; ++l) t[l] += t[l + w];
    delta[i] = t[0];
  }
}

FANOUT_BF16_DOT_TARGET void store_rows(bf16* __restrict dst, const float* __restrict src,
                                       int64_t ld, int64_t n, int64_t D, int64_t Dp, float scale) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < D; ++c) store(dst[i * ld + c], src[i * Dp + c] * scale);
}

struct Buffers {
  std::vector<float> f;
  std::vector<uint16_t> h;
};
using Scratch = tbb::enumerable_thread_specific<Buffers>;

}  // namespace

void attention_forward_bf16dot(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                               int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV,
                               int64_t D) {
  const int64_t group = H / KV;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t ldq = H * D, ldk = KV * D;
  const int64_t Dp = round_up(D, kDpad), Tq_pad = round_up(Tq, kPad), Tk_pad = round_up(Tk, kPad);
  Scratch scratch;
  parallel_for_index(int64_t{0}, B * KV, [&](int64_t task) {
    const int64_t b = task / KV, kh = task % KV;
    Buffers& buf = scratch.local();
    buf.f.resize(Tq_pad * Dp + kBk * kBq);
    buf.h.resize(3 * Tk_pad * Dp + 2 * Tq_pad * Dp + kBk * kBq);
    float* Of = buf.f.data();
    float* ST = Of + Tq_pad * Dp;
    uint16_t* K16 = buf.h.data();
    uint16_t* Vp = K16 + Tk_pad * Dp;
    uint16_t* tmp = Vp + Tk_pad * Dp;  // V row-major, then reused for q
    uint16_t* Qp = tmp + Tk_pad * Dp + Tq_pad * Dp;
    uint16_t* Pp = Qp + Tq_pad * Dp;
    const int64_t koff = b * Tk * ldk + kh * D;
    rows16(K16, k + koff, ldk, Tk, Tk_pad, D, Dp);
    rows16(tmp, v + koff, ldk, Tk, Tk_pad, D, Dp);
    row_pairs(Vp, tmp, Tk_pad, Dp);
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const int64_t off = b * Tq * ldq + h * D;
      rows16(tmp, q + off, ldq, Tq, Tq_pad, D, Dp);
      block_pairs(Qp, tmp, Tq_pad, Dp);
      forward_head(Of, lse + (b * H + h) * Tq, Qp, K16, Vp, Tq, Tk, Dp, scale, ST, Pp);
      store_rows(out + off, Of, ldq, Tq, D, Dp, 1.0f);
    }
  });
}

template <typename G>
void attention_backward_bf16dot(bf16* dq, bf16* dk, bf16* dv, const G* dout, const bf16* q,
                                const bf16* k, const bf16* v, const bf16* out, const float* lse,
                                int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D) {
  const int64_t group = H / KV;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t ldq = H * D, ldk = KV * D;
  const int64_t Dp = round_up(D, kDpad), Tp = round_up(T, kPad);
  Scratch scratch;
  parallel_for_index(int64_t{0}, B * KV, [&](int64_t task) {
    const int64_t b = task / KV, kh = task % KV;
    Buffers& buf = scratch.local();
    buf.f.resize(5 * Tp * Dp + 2 * Tp + 2 * kBk * kBq);
    buf.h.resize(8 * Tp * Dp + 3 * kBk * kBq);
    float* dKf = buf.f.data();
    float* dVf = dKf + Tp * Dp;
    float* dQf = dVf + Tp * Dp;
    float* dOf = dQf + Tp * Dp;  // fp32 dout, for delta
    float* Of = dOf + Tp * Dp;   // fp32 out, for delta
    float* Lf = Of + Tp * Dp;    // lse, +inf past T
    float* delta = Lf + Tp;      // dout . out, 0 past T
    float* PT = delta + Tp;
    float* dST = PT + kBk * kBq;
    uint16_t* K16 = buf.h.data();
    uint16_t* Kr = K16 + Tp * Dp;
    uint16_t* V16 = Kr + Tp * Dp;
    uint16_t* tmp = V16 + Tp * Dp;
    uint16_t* Qp = tmp + Tp * Dp;
    uint16_t* Qr = Qp + Tp * Dp;
    uint16_t* dOp = Qr + Tp * Dp;
    uint16_t* dOr = dOp + Tp * Dp;
    uint16_t* P16 = dOr + Tp * Dp;
    uint16_t* dS16 = P16 + kBk * kBq;
    uint16_t* dSp = dS16 + kBk * kBq;
    const int64_t koff = b * T * ldk + kh * D;
    rows16(K16, k + koff, ldk, T, Tp, D, Dp);
    row_pairs(Kr, K16, Tp, Dp);
    rows16(V16, v + koff, ldk, T, Tp, D, Dp);
    std::fill(dKf, dKf + 2 * Tp * Dp, 0.0f);
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const int64_t off = b * T * ldq + h * D;
      rows16(tmp, q + off, ldq, T, Tp, D, Dp);
      block_pairs(Qp, tmp, Tp, Dp);
      row_pairs(Qr, tmp, Tp, Dp);
      rows16(tmp, dout + off, ldq, T, Tp, D, Dp);
      block_pairs(dOp, tmp, Tp, Dp);
      row_pairs(dOr, tmp, Tp, Dp);
      rows32(dOf, dout + off, ldq, T, Tp, D, Dp);
      rows32(Of, out + off, ldq, T, Tp, D, Dp);
      row_dots(delta, dOf, Of, Tp, Dp);
      std::copy(lse + (b * H + h) * T, lse + (b * H + h + 1) * T, Lf);
      std::fill(Lf + T, Lf + Tp, std::numeric_limits<float>::infinity());
      backward_head(dQf, dKf, dVf, Qp, Qr, dOp, dOr, K16, Kr, V16, Lf, delta, T, Dp, scale, PT, dST,
                    P16, dS16, dSp);
      store_rows(dq + off, dQf, ldq, T, D, Dp, scale);
    }
    store_rows(dk + koff, dKf, ldk, T, D, Dp, scale);
    store_rows(dv + koff, dVf, ldk, T, D, Dp, 1.0f);
  });
}

#else  // no AVX512-BF16 build: never selected (attention_bf16_dot_supported() is false)

void attention_forward_bf16dot(bf16*, float*, const bf16*, const bf16*, const bf16*, int64_t,
                               int64_t, int64_t, int64_t, int64_t, int64_t) {
  FANOUT_ASSERT(false, "attention_forward_bf16dot: built without AVX512-BF16");
}

template <typename G>
void attention_backward_bf16dot(bf16*, bf16*, bf16*, const G*, const bf16*, const bf16*,
                                const bf16*, const bf16*, const float*, int64_t, int64_t, int64_t,
                                int64_t, int64_t) {
  FANOUT_ASSERT(false, "attention_backward_bf16dot: built without AVX512-BF16");
}

#endif

template void attention_backward_bf16dot<float>(bf16*, bf16*, bf16*, const float*, const bf16*,
                                                const bf16*, const bf16*, const bf16*, const float*,
                                                int64_t, int64_t, int64_t, int64_t, int64_t);
template void attention_backward_bf16dot<bf16>(bf16*, bf16*, bf16*, const bf16*, const bf16*,
                                               const bf16*, const bf16*, const bf16*, const float*,
                                               int64_t, int64_t, int64_t, int64_t, int64_t);

}  // namespace fanout::ops::cpu
