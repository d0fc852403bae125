// CUDA RoPE over f32 or bf16 rows. A block takes one position t, a group of batch
// rows and a tile of pairs (ops/rope_plan.h): its threads compute the tile's
// inv_freq (rope_inv_freq, the function the CPU tables use, rope_scaling
// included), angles and their cos and sin once, in double as the CPU reference
// does (an fp32 angle would lose 1e-3 rad at position 8192), into shared memory;
// then each step rotates `vec` pairs of one (b, t, h) row, reading both halves
// with 16-byte loads where the layout allows, before writing either, so out may
// alias inp. A (b, t) row may sit ld elements from the next (the fused q/k/v rows).
// The angles are computed T * D / 2 times per batch group instead of once per
// rotated pair, and the loads are 16 bytes instead of 2.
//
// As ops/cpu/rope.cpp: f32 rows rotate in double; bf16 rows rotate in float, with
// cos and sin rounded to float and the products and sums as separate _rn
// operations (the CPU's baseline x86-64 build has no FMA to contract them into),
// rounded once to bf16 at the store.

#include "engine/core/bf16.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/rope.h"
#include "ops/rope_plan.h"

namespace fanout::ops::cuda {

namespace {

// The rotation of one pair, in the type the CPU rotates that storage in.
__device__ inline void rotate_pair(float& y1, float& y2, float x1f, float x2f, double cs,
                                   double sn) {
  const double x1 = x1f, x2 = x2f;
  y1 = static_cast<float>(x1 * cs - x2 * sn);
  y2 = static_cast<float>(x2 * cs + x1 * sn);
}
__device__ inline void rotate_pair(uint16_t& y1, uint16_t& y2, uint16_t x1b, uint16_t x2b,
                                   double cs_d, double sn_d) {
  const float cs = static_cast<float>(cs_d), sn = static_cast<float>(sn_d);
  const float x1 = bf16_bits_to_float(x1b), x2 = bf16_bits_to_float(x2b);
  y1 = float_to_bf16_bits(__fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn)));
  y2 = float_to_bf16_bits(__fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn)));
}

// Pairs i .. i + V of one head: x1 the first half's, x2 = x1 + half the second's.
template <int V, typename X>
__device__ inline void rotate_pairs(X* y1, X* y2, const X* x1, const X* x2, const double* cs,
                                    const double* sn) {
  if constexpr (V == 1) {
    rotate_pair(*y1, *y2, *x1, *x2, cs[0], sn[0]);
  } else {
    static_assert(V == Pack16<X>::kSize, "a vector step is one 16-byte pack");
    const Pack16<X> a = load_pack(x1), b = load_pack(x2);
    Pack16<X> ya, yb;
#pragma unroll
    for (int k = 0; k < V; ++k) rotate_pair(ya.v[k], yb.v[k], a.v[k], b.v[k], cs[k], sn[k]);
    store_pack(y1, ya);
    store_pack(y2, yb);
  }
}

// sign +1: forward rotation; -1: its transpose (backward).
template <int V, typename X>
__global__ void rope_rotate_tiles(X* out, const X* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                                  RopeFreq freq, int64_t pos_offset, double sign, int64_t ld_out,
                                  int64_t ld_in, RopePlan plan) {
  __shared__ double cs[kRopePairTile], sn[kRopePairTile];
  const RopeBlock r = rope_block(plan, blockIdx.x, B, D);
  for (int64_t i = threadIdx.x; i < r.pairs; i += blockDim.x) {
    double s, c;
    sincos(static_cast<double>(pos_offset + r.t) * rope_inv_freq(freq, r.i0 + i, D), &s, &c);
    cs[i] = c;
    sn[i] = s * sign;
  }
  __syncthreads();
  const int64_t half = D / 2, items = rope_items(plan, r, H);
  for (int64_t j = threadIdx.x; j < items; j += blockDim.x) {
    const RopeItem it = rope_item(plan, r, H, j);
    const int64_t row = it.b * T + r.t, col = it.h * D + r.i0 + it.i;
    X* y = out + row * ld_out + col;
    const X* x = inp + row * ld_in + col;
    rotate_pairs<V>(y, y + half, x, x + half, cs + it.i, sn + it.i);
  }
}

template <typename X>
void rope_launch(const char* op, void* stream, X* out, const X* inp, int64_t B, int64_t T,
                 int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset, double sign,
                 int64_t ld_out, int64_t ld_in) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  if (ld_out == 0) ld_out = H * D;
  if (ld_in == 0) ld_in = H * D;
  const RopePlan plan =
      rope_plan(B, T, H, D, sizeof(X), ld_out, ld_in, is_aligned16(out) && is_aligned16(inp));
  if (plan.blocks == 0) return;
  const int blocks = checked_int(op, "T * ceil(B / rows a block) * pair tiles", plan.blocks);
  BoundStream s(stream);
  if (plan.vec > 1) {
    rope_rotate_tiles<Pack16<X>::kSize><<<blocks, plan.threads, 0, s>>>(
        out, inp, B, T, H, D, freq, pos_offset, sign, ld_out, ld_in, plan);
  } else {
    rope_rotate_tiles<1><<<blocks, plan.threads, 0, s>>>(out, inp, B, T, H, D, freq, pos_offset,
                                                         sign, ld_out, ld_in, plan);
  }
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
