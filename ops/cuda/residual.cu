// CUDA residual add and its backward (f32, the residual stream's dtype under every
// precision): grid-stride loops, 8 elements a step with 16-byte loads and stores
// where the pointers align together (elementwise.cuh), one at a time elsewhere.
// No __restrict__: the pointers may alias (see ops/cpu/residual.h), and each
// thread reads its elements before it writes them.

#include "ops/cuda/common.cuh"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/residual.h"

namespace fanout::ops::cuda {

namespace {

__global__ void residual_add(float* out, const float* a, const float* b, int64_t n, VecSplit v) {
  for (int64_t g = grid_thread(); g < v.groups; g += grid_stride()) {
    const int64_t i = v.head + kVec * g;
    float x[kVec], y[kVec];
    load8(a + i, x);
    load8(b + i, y);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] += y[k];
    store8(out + i, x);
  }
  for (int64_t j = grid_thread(); j < v.scalar(n); j += grid_stride()) {
    const int64_t i = v.scalar_index(j);
    out[i] = a[i] + b[i];
  }
}

// da += dout, then db += dout, as the CPU kernel: da == db gets dout twice (the
// store to da lands before db is loaded, in the same thread).
__global__ void residual_grad_both(float* da, float* db, const float* dout, int64_t n, VecSplit v) {
  for (int64_t g = grid_thread(); g < v.groups; g += grid_stride()) {
    const int64_t i = v.head + kVec * g;
    float d[kVec], x[kVec];
    load8(dout + i, d);
    load8(da + i, x);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] += d[k];
    store8(da + i, x);
    load8(db + i, x);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] += d[k];
    store8(db + i, x);
  }
  for (int64_t j = grid_thread(); j < v.scalar(n); j += grid_stride()) {
    const int64_t i = v.scalar_index(j);
    float g = dout[i];
    da[i] += g;
    db[i] += g;
  }
}

}  // namespace

// ---

void residual_forward_f32(void* stream, float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  const VecSplit v = vec_split(n, out, a, b);
  BoundStream s(stream);
  residual_add<<<grid_for(v.groups > 0 ? v.groups : n), kBlock, 0, s>>>(out, a, b, n, v);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void residual_backward_f32(void* stream, float* da, float* db, const float* dout, int64_t n) {
  if (n <= 0) return;
  const VecSplit v = vec_split(n, da, db, dout);
  BoundStream s(stream);
  residual_grad_both<<<grid_for(v.groups > 0 ? v.groups : n), kBlock, 0, s>>>(da, db, dout, n, v);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
