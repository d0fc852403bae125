// CUDA SwiGLU forward and backward over f32 or bf16 storage (fp32 math, one
// rounding per store): grid-stride loops with the overflow-free sigmoid of
// ops/cpu/swiglu.cpp, 8 elements a step with 16-byte loads and stores where the
// pointers align together (elementwise.cuh); over rows ld apart (the fused
// gate/up projection's), 8 a step where cols, ld and the pointers allow. expf is
// the accurate libdevice version (no fast math), within 2 ulp of the CPU's.

#include "ops/cuda/common.cuh"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/swiglu.h"

namespace fanout::ops::cuda {

namespace {

__device__ inline float sigmoid_stable(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}

__device__ inline float silu_mul(float g, float u) {
  return g * sigmoid_stable(g) * u;
}

// silu'(g) = s (1 + g (1 - s)).
__device__ inline void silu_mul_grad(float dy, float g, float u, float& dg, float& du) {
  float s = sigmoid_stable(g);
  dg = dy * u * s * (1.0f + g * (1.0f - s));
  du = dy * g * s;
}

// X: gate, up, out (float or bf16 bits).
template <typename X>
__global__ void swiglu_gate(X* out, const X* gate, const X* up, int64_t n, VecSplit v) {
  for (int64_t gi = grid_thread(); gi < v.groups; gi += grid_stride()) {
    const int64_t i = v.head + kVec * gi;
    float g[kVec], u[kVec];
    load8(gate + i, g);
    load8(up + i, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = silu_mul(g[k], u[k]);
    store8(out + i, g);
  }
  for (int64_t j = grid_thread(); j < v.scalar(n); j += grid_stride()) {
    const int64_t i = v.scalar_index(j);
    store(out, i, silu_mul(load(gate, i), load(up, i)));
  }
}

// X: gate, up, dgate, dup; G: dout. Every input of an element is read before
// either output is written (dgate may alias gate, dup up).
template <typename X, typename G>
__global__ void swiglu_gate_grad(X* dgate, X* dup, const G* dout, const X* gate, const X* up,
                                 int64_t n, VecSplit v) {
  for (int64_t gi = grid_thread(); gi < v.groups; gi += grid_stride()) {
    const int64_t i = v.head + kVec * gi;
    float dy[kVec], g[kVec], u[kVec];
    load8(dout + i, dy);
    load8(gate + i, g);
    load8(up + i, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) silu_mul_grad(dy[k], g[k], u[k], g[k], u[k]);
    store8(dgate + i, g);
    store8(dup + i, u);
  }
  for (int64_t j = grid_thread(); j < v.scalar(n); j += grid_stride()) {
    const int64_t i = v.scalar_index(j);
    float dg, du;
    silu_mul_grad(load(dout, i), load(gate, i), load(up, i), dg, du);
    store(dgate, i, dg);
    store(dup, i, du);
  }
}

// The row layout (rows > 1, Note [Fused projections] in models/llama_model.cpp):
// gate and up at r * ld + c, out and dout at r * cols + c. vec: 8 elements a step,
// when cols and ld are multiples of 8 and every pointer is 16-byte aligned.
template <typename X>
__global__ void swiglu_gate_rows(X* out, const X* gate, const X* up, int64_t rows, int64_t cols,
                                 int64_t ld, bool vec) {
  const int64_t step = vec ? kVec : 1, per_row = cols / step;
  for (int64_t gi = grid_thread(); gi < rows * per_row; gi += grid_stride()) {
    const int64_t r = gi / per_row, c = (gi - r * per_row) * step;
    const int64_t io = r * cols + c, ig = r * ld + c;
    if (vec) {
      float g[kVec], u[kVec];
      load8(gate + ig, g);
      load8(up + ig, u);
#pragma unroll
      for (int k = 0; k < kVec; ++k) g[k] = silu_mul(g[k], u[k]);
      store8(out + io, g);
    } else {
      store(out, io, silu_mul(load(gate, ig), load(up, ig)));
    }
  }
}

template <typename X, typename G>
__global__ void swiglu_gate_grad_rows(X* dgate, X* dup, const G* dout, const X* gate, const X* up,
                                      int64_t rows, int64_t cols, int64_t ld, bool vec) {
  const int64_t step = vec ? kVec : 1, per_row = cols / step;
  for (int64_t gi = grid_thread(); gi < rows * per_row; gi += grid_stride()) {
    const int64_t r = gi / per_row, c = (gi - r * per_row) * step;
    const int64_t io = r * cols + c, ig = r * ld + c;
    if (vec) {
      float dy[kVec], g[kVec], u[kVec];
      load8(dout + io, dy);
      load8(gate + ig, g);
      load8(up + ig, u);
#pragma unroll
      for (int k = 0; k < kVec; ++k) silu_mul_grad(dy[k], g[k], u[k], g[k], u[k]);
      store8(dgate + ig, g);
      store8(dup + ig, u);
    } else {
      float dg, du;
      silu_mul_grad(load(dout, io), load(gate, ig), load(up, ig), dg, du);
      store(dgate, ig, dg);
      store(dup, ig, du);
    }
  }
}

template <typename... P>
bool rows_vectorised(int64_t cols, int64_t ld, const P*... ps) {
  return cols % kVec == 0 && ld % kVec == 0 && (is_aligned16(ps) && ...);
}

template <typename X>
void swiglu_forward_launch(void* stream, X* out, const X* gate, const X* up, int64_t rows,
                           int64_t cols, int64_t ld) {
  if (rows <= 0 || cols <= 0) return;
  BoundStream s(stream);
  if (rows == 1) {
    const int64_t n = cols;
    const VecSplit v = vec_split(n, out, gate, up);
    swiglu_gate<<<grid_for(v.groups > 0 ? v.groups : n), kBlock, 0, s>>>(out, gate, up, n, v);
  } else {
    const bool vec = rows_vectorised(cols, ld, out, gate, up);
    const int64_t work = rows * (vec ? cols / kVec : cols);
    swiglu_gate_rows<<<grid_for(work), kBlock, 0, s>>>(out, gate, up, rows, cols, ld, vec);
  }
  FANOUT_CUDA_LAUNCH_CHECK();
}

template <typename X, typename G>
void swiglu_backward_launch(void* stream, X* dgate, X* dup, const G* dout, const X* gate,
                            const X* up, int64_t rows, int64_t cols, int64_t ld) {
  if (rows <= 0 || cols <= 0) return;
  BoundStream s(stream);
  if (rows == 1) {
    const int64_t n = cols;
    const VecSplit v = vec_split(n, dgate, dup, dout, gate, up);
    swiglu_gate_grad<<<grid_for(v.groups > 0 ? v.groups : n), kBlock, 0, s>>>(dgate, dup, dout,
                                                                              gate, up, n, v);
  } else {
    const bool vec = rows_vectorised(cols, ld, dgate, dup, dout, gate, up);
    const int64_t work = rows * (vec ? cols / kVec : cols);
    swiglu_gate_grad_rows<<<grid_for(work), kBlock, 0, s>>>(dgate, dup, dout, gate, up, rows, cols,
                                                            ld, vec);
  }
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace

// ---

template <typename X>
void swiglu_forward(void* stream, X* out, const X* gate, const X* up, int64_t rows, int64_t cols,
                    int64_t ld) {
  swiglu_forward_launch(stream, out, gate, up, rows, cols, ld);
}

template <typename X, typename G>
void swiglu_backward(void* stream, X* dgate, X* dup, const G* dout, const X* gate, const X* up,
                     int64_t rows, int64_t cols, int64_t ld) {
  swiglu_backward_launch(stream, dgate, dup, dout, gate, up, rows, cols, ld);
}

template void swiglu_forward<float>(void*, float*, const float*, const float*, int64_t, int64_t,
                                    int64_t);
template void swiglu_forward<uint16_t>(void*, uint16_t*, const uint16_t*, const uint16_t*, int64_t,
                                       int64_t, int64_t);
template void swiglu_backward<float, float>(void*, float*, float*, const float*, const float*,
                                            const float*, int64_t, int64_t, int64_t);
template void swiglu_backward<float, uint16_t>(void*, float*, float*, const uint16_t*, const float*,
                                               const float*, int64_t, int64_t, int64_t);
template void swiglu_backward<uint16_t, float>(void*, uint16_t*, uint16_t*, const float*,
                                               const uint16_t*, const uint16_t*, int64_t, int64_t,
                                               int64_t);
template void swiglu_backward<uint16_t, uint16_t>(void*, uint16_t*, uint16_t*, const uint16_t*,
                                                  const uint16_t*, const uint16_t*, int64_t,
                                                  int64_t, int64_t);

}  // namespace fanout::ops::cuda
