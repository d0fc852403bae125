// CUDA RoPE: a thread per (position t, pair i) computes inv_freq (rope_inv_freq,
// the function the CPU tables use, rope_scaling included), the angle and
// its cos and sin once, in double as the CPU reference does (an fp32 angle would
// lose 1e-3 rad at position 8192), then rotates pair i of row (b, t, h) for its
// share of the B*H rows (grid.y strides over them). Each thread reads both halves
// of a pair before writing either, so out may alias inp.

#include <algorithm>

#include "ops/cuda/common.cuh"
#include "ops/cuda/rope.h"

namespace fanout::ops::cuda {

namespace {

constexpr int kMaxRowBlocks = 64;  // grid.y: blocks striding over the B*H rows

// sign +1: forward rotation; -1: its transpose (backward).
__global__ void rope_rotate_pairs(float* out, const float* inp, int64_t B, int64_t T, int64_t H,
                                  int64_t D, RopeFreq freq, int64_t pos_offset, double sign) {
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
    const int64_t row = ((b * T + t) * H + h) * D;
    const double x1 = inp[row + i], x2 = inp[row + i + half];
    out[row + i] = static_cast<float>(x1 * cs - x2 * sn);
    out[row + i + half] = static_cast<float>(x2 * cs + x1 * sn);
  }
}

void rope_launch(const char* op, void* stream, float* out, const float* inp, int64_t B, int64_t T,
                 int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset, double sign) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  const int64_t pairs = T * (D / 2);
  const dim3 grid(checked_int(op, "T * D / 2 / 256", (pairs + kBlock - 1) / kBlock),
                  static_cast<unsigned>(std::min<int64_t>(B * H, kMaxRowBlocks)));
  cudaStream_t s = stream_bind(stream);
  rope_rotate_pairs<<<grid, kBlock, 0, s>>>(out, inp, B, T, H, D, freq, pos_offset, sign);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace

// ---

void rope_forward_f32(void* stream, float* out, const float* inp, int64_t B, int64_t T, int64_t H,
                      int64_t D, const RopeFreq& freq, int64_t pos_offset) {
  rope_launch("rope_forward", stream, out, inp, B, T, H, D, freq, pos_offset, 1.0);
}

void rope_backward_f32(void* stream, float* dinp, const float* dout, int64_t B, int64_t T,
                       int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset) {
  rope_launch("rope_backward", stream, dinp, dout, B, T, H, D, freq, pos_offset, -1.0);
}

}  // namespace fanout::ops::cuda
