#pragma once
// Vector access for the element-wise kernels over f32 and bf16 storage: 8
// consecutive elements at once (one 16-byte transaction of bf16, two of f32),
// widened to float on the way in and rounded once on the way out (bf16.cuh), and
// the split of [0, n) into a scalar head, an 8-element vector body where every
// pointer is 16-byte aligned, and a scalar tail. Include only from .cu files.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/core/bf16.cuh"

namespace fanout::ops::cuda {

constexpr int kVec = 8;  // elements per vector step

// x[k] = p[k] for k < 8, widened; p 16-byte aligned.
__device__ __forceinline__ void load8(const float* p, float (&x)[kVec]) {
  const Pack16<float> a = load_pack(p), b = load_pack(p + 4);
#pragma unroll
  for (int k = 0; k < 4; ++k) x[k] = a.v[k], x[k + 4] = b.v[k];
}
__device__ __forceinline__ void load8(const uint16_t* p, float (&x)[kVec]) {
  const Pack16<uint16_t> a = load_pack(p);
#pragma unroll
  for (int k = 0; k < kVec; ++k) x[k] = bf16_bits_to_float(a.v[k]);
}

// p[k] = x[k] for k < 8, each rounded once to p's type; p 16-byte aligned.
__device__ __forceinline__ void store8(float* p, const float (&x)[kVec]) {
  Pack16<float> a, b;
#pragma unroll
  for (int k = 0; k < 4; ++k) a.v[k] = x[k], b.v[k] = x[k + 4];
  store_pack(p, a);
  store_pack(p + 4, b);
}
__device__ __forceinline__ void store8(uint16_t* p, const float (&x)[kVec]) {
  Pack16<uint16_t> a;
#pragma unroll
  for (int k = 0; k < kVec; ++k) a.v[k] = float_to_bf16_bits(x[k]);
  store_pack(p, a);
}

// [0, n) = scalar head [0, head) + vector body of `groups` 8-element groups +
// scalar tail. The scalar elements are numbered j in [0, scalar(n)).
struct VecSplit {
  int64_t head = 0, groups = 0;
  __host__ __device__ int64_t scalar(int64_t n) const { return n - kVec * groups; }
  __host__ __device__ int64_t scalar_index(int64_t j) const {
    return j < head ? j : j + kVec * groups;
  }
};

namespace detail {
// Elements of T from p to the next 16-byte boundary, or -1 when p is not even
// aligned to its element (no boundary is reachable).
template <typename T>
inline int64_t elems_to_aligned16(const T* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a % sizeof(T) != 0) return -1;
  return static_cast<int64_t>((16 - a % 16) % 16 / sizeof(T));
}
}  // namespace detail

// The split for pointers that all advance one element per index: the head brings
// the first to a 16-byte boundary; if the others are not on one there too (views
// at different offsets), everything is scalar.
template <typename P0, typename... P>
VecSplit vec_split(int64_t n, const P0* p0, const P*... ps) {
  VecSplit v;
  const int64_t head = detail::elems_to_aligned16(p0);
  if (head < 0 || head >= n) return v;
  if (!(is_aligned16(p0 + head) && ... && is_aligned16(ps + head))) return v;
  v.head = head;
  v.groups = (n - head) / kVec;
  return v;
}

// Grid-stride index of this thread and the stride.
__device__ __forceinline__ int64_t grid_thread() {
  return blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return int64_t(gridDim.x) * blockDim.x;
}

}  // namespace fanout::ops::cuda
