#pragma once
// Helpers shared by the CUDA op kernels in ops/cuda/*.cu: binding the calling
// thread to a stream's device for a scope, grid sizes for grid-stride loops, warp and block
// reductions, and stream-ordered scratch memory. Include only from .cu files.

#include <cuda_runtime.h>

#include <cstdint>
#include <new>

#include "engine/core/check.h"
#include "engine/core/cuda_check.h"
#include "engine/core/cuda_guard.h"

namespace fanout::ops::cuda {

constexpr int kWarp = 32;
constexpr int kBlock = 256;  // threads per block of the element-wise kernels

// The cudaStream_t behind a Stream's void* handle, with the calling thread bound
// to the stream's device for the scope (a launch on another device's stream
// fails, and DataParallel drives several devices from its threads) and given its
// previous device back at the end (Note [Device guards], cuda_runtime.cpp):
//   BoundStream s(stream);  kernel<<<grid, block, 0, s>>>(...);
class BoundStream {
 public:
  explicit BoundStream(void* stream)
      : stream_(static_cast<cudaStream_t>(stream)), guard_(stream_) {}
  BoundStream(const BoundStream&) = delete;
  BoundStream& operator=(const BoundStream&) = delete;
  operator cudaStream_t() const { return stream_; }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_;
  CudaDeviceGuard guard_;
};

// The calling thread's current device (inside a BoundStream scope: the stream's).
inline int current_device() {
  int device = -1;
  FANOUT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Blocks for a grid-stride loop over n items: one item per thread up to a cap
// (the loop covers the rest), at least one block.
inline int grid_for(int64_t n, int block = kBlock) {
  int64_t blocks = (n + block - 1) / block;
  if (blocks < 1) blocks = 1;
  return static_cast<int>(blocks < (1 << 16) ? blocks : (1 << 16));
}

// FANOUT_CHECK that a dimension fits the int a kernel or library indexes with.
inline int checked_int(const char* op, const char* what, int64_t v) {
  FANOUT_CHECK(v >= 0 && v <= INT32_MAX, op, ": ", what, " = ", v,
               " does not fit the 32-bit integer of the CUDA kernel");
  return static_cast<int>(v);
}

// ---

// Butterfly reductions: every lane ends with the same bits (each step adds the
// same two operands on both partners), so warp-uniform branches on the result
// are safe.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__device__ inline T warp_max(T v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block, returned to every thread. blockDim.x is a multiple of 32
// (at most 1024); every thread of the block must call it. The leading barrier
// lets the shared slots be reused by back-to-back calls.
template <typename T>
__device__ inline T block_sum(T v) {
  __shared__ T partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarp) ? partial[lane] : T(0);
  return warp_sum(v);
}

template <typename T>
__device__ inline T block_max(T v, T lowest) {
  __shared__ T partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarp) ? partial[lane] : lowest;
  return warp_max(v);
}

// ---

// Device scratch from the device's stream-ordered pool (the one the allocator
// uses), freed in stream order: kernels queued before the free may still use it.
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) FANOUT_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  // Without throwing: no memory (as<T>() null) when the pool cannot spare `bytes`,
  // the error cleared so that no later check reports it.
  StreamScratch(size_t bytes, cudaStream_t stream, std::nothrow_t) : stream_(stream) {
    if (bytes > 0 && cudaMallocAsync(&ptr_, bytes, stream) != cudaSuccess) {
      ptr_ = nullptr;
      (void)cudaGetLastError();
    }
  }
  ~StreamScratch() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);  // never throws; errors surface at the next check
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace fanout::ops::cuda
