// CUDA RoPE over f32 or bf16 rows: a thread per (position t, pair i) computes
// inv_freq (rope_inv_freq, the function the CPU tables use, rope_scaling
// included), the angle and its cos and sin once, in double as the CPU reference
// does (an fp32 angle would lose 1e-3 rad at position 8192), then rotates pair i of
// row (b, t, h) for its share of the B*H rows (grid.y strides over them). Each
// thread reads both halves of a pair before writing either, so out may alias inp.
// A (b, t) row may sit ld elements from the next (the fused q/k/v rows).
//
// As ops/cpu/rope.cpp: f32 rows rotate in double; bf16 rows rotate in float, with
// cos and sin rounded to float and the products and sums as separate _rn
// operations (the CPU's baseline x86-64 build has no FMA to contract them into),
// rounded once to bf16 at the store.

#include <algorithm>

#include "engine/core/bf16.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/rope.h"

namespace fanout::ops::cuda {

namespace {

constexpr int kMaxRowBlocks = 64;  // grid.y: blocks striding over the B*H rows

// The rotation of one pair, in the type the CPU rotates that storage in.
__device__ inline void rotate_pair(float* y1, float* y2, const float* x1p, const float* x2p,
                                   double cs, double sn) {
  const double x1 = *x1p, x2 = *x2p;
  *y1 = static_cast<float>(x1 * cs - x2 * sn);
  *y2 = static_cast<float>(x2 * cs + x1 * sn);
}
__device__ inline void rotate_pair(uint16_t* y1, uint16_t* y2, const uint16_t* x1p,
                                   const uint16_t* x2p, double cs_d, double sn_d) {
  const float cs = static_cast<float>(cs_d), sn = static_cast<float>(sn_d);
  const float x1 = bf16_bits_to_float(*x1p), x2 = bf16_bits_to_float(*x2p);
  *y1 = float_to_bf16_bits(__fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn)));
  *y2 = float_to_bf16_bits(__fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn)));
}

// sign +1: forward rotation; -1: its transpose (backward).
template <typename X>
__global__ void rope_rotate_pairs(X* out, const X* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                                  RopeFreq freq, int64_t pos_offset, double sign, int64_t ld_out,
                                  int64_t ld_in) {
  const int64_t half = D / 2;
  const int64_t ti = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ti >= T * half) return;
  const int64_t t = ti / half, i = ti - t * half;
  const double inv_freq = rope_inv_freq(freq, i, D);
  double sn, cs;
  sincos(static_cast<double>(pos_offset + t) * inv_freq, &sn, &cs);
  sn *= sign;
  for (int64_t bh = blockIdx.y; bh < B * H; bh += gridDim.y) {
    const int64_t b = bh / H, h = bh - b * H;
    X* y = out + (b * T + t) * ld_out + h * D + i;
    const X* x = inp + (b * T + t) * ld_in + h * D + i;
    rotate_pair(y, y + half, x, x + half, cs, sn);
  }
}

template <typename X>
void rope_launch(const char* op, void* stream, X* out, const X* inp, int64_t B, int64_t T,
                 int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset, double sign,
                 int64_t ld_out, int64_t ld_in) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  if (ld_out == 0) ld_out = H * D;
  if (ld_in == 0) ld_in = H * D;
  const int64_t pairs = T * (D / 2);
  const dim3 grid(checked_int(op, "T * D / 2 / 256", (pairs + kBlock - 1) / kBlock),
                  static_cast<unsigned>(std::min<int64_t>(B * H, kMaxRowBlocks)));
  BoundStream s(stream);
  rope_rotate_pairs<<<grid, kBlock, 0, s>>>(out, inp, B, T, H, D, freq, pos_offset, sign, ld_out,
                                            ld_in);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace

// ---

template <typename X>
void rope_forward(void* stream, X* out, const X* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                  const RopeFreq& freq, int64_t pos_offset, int64_t ld_out, int64_t ld_in) {
  rope_launch("rope_forward", stream, out, inp, B, T, H, D, freq, pos_offset, 1.0, ld_out, ld_in);
}

template <typename X>
void rope_backward(void* stream, X* dinp, const X* dout, int64_t B, int64_t T, int64_t H, int64_t D,
                   const RopeFreq& freq, int64_t pos_offset, int64_t ld_dinp, int64_t ld_dout) {
  rope_launch("rope_backward", stream, dinp, dout, B, T, H, D, freq, pos_offset, -1.0, ld_dinp,
              ld_dout);
}

template void rope_forward<float>(void*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                  const RopeFreq&, int64_t, int64_t, int64_t);
template void rope_forward<uint16_t>(void*, uint16_t*, const uint16_t*, int64_t, int64_t, int64_t,
                                     int64_t, const RopeFreq&, int64_t, int64_t, int64_t);
template void rope_backward<float>(void*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                   const RopeFreq&, int64_t, int64_t, int64_t);
template void rope_backward<uint16_t>(void*, uint16_t*, const uint16_t*, int64_t, int64_t, int64_t,
                                      int64_t, const RopeFreq&, int64_t, int64_t, int64_t);

}  // namespace fanout::ops::cuda
