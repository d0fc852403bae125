#pragma once
// bf16 on the device, as engine/core/dtype.h defines it on the host: raw uint16_t
// bits, round to nearest even at every store (NaN kept quiet), exact widening.
// The integer rounding rather than cuda_bf16.h's intrinsics keeps the bits equal to
// the CPU's by construction. Plus 16-byte vector access (8 bf16 or 4 f32 at once)
// for the element-wise kernels. Include only from .cu files (the engine's flat
// kernels and ops/cuda/).

#include <cuda_runtime.h>

#include <cstdint>

namespace fanout {

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);       // ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// Storage-type adaptors so one kernel template serves f32 and bf16 tensors:
// load<T>(p, i) widens to float, store<T>(p, i, x) rounds once.
template <typename T>
__device__ __forceinline__ float load(const T* p, int64_t i);
template <>
__device__ __forceinline__ float load<float>(const float* p, int64_t i) {
  return p[i];
}
template <>
__device__ __forceinline__ float load<uint16_t>(const uint16_t* p, int64_t i) {
  return bf16_bits_to_float(p[i]);
}

template <typename T>
__device__ __forceinline__ void store(T* p, int64_t i, float x);
template <>
__device__ __forceinline__ void store<float>(float* p, int64_t i, float x) {
  p[i] = x;
}
template <>
__device__ __forceinline__ void store<uint16_t>(uint16_t* p, int64_t i, float x) {
  p[i] = float_to_bf16_bits(x);
}

// 16 bytes of T: 8 bf16 or 4 f32, loaded and stored in one transaction. The
// pointer must be 16-byte aligned (is_aligned16); kernels take the vector path
// for the aligned body and a scalar loop for the rest.
template <typename T>
struct alignas(16) Pack16 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <typename T>
__device__ __forceinline__ Pack16<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack16<T>*>(p);
}

template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack16<T>& x) {
  *reinterpret_cast<Pack16<T>*>(p) = x;
}

__host__ __device__ __forceinline__ bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace fanout
