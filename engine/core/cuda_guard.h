#pragma once
// CudaDeviceGuard: the calling thread works on one CUDA device for a scope and
// gets its previous device back at the end (Note [Device guards], cuda_runtime.cpp).
// Device threads pin their device for good (cuda_set_device); every other CUDA call
// binds through a guard. Include only from .cu files or from .cpp files compiled
// with FANOUT_HAS_CUDA.

#include <cuda_runtime_api.h>

namespace fanout {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  // The device `stream` belongs to.
  explicit CudaDeviceGuard(cudaStream_t stream);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to give back
};

// The device a stream was created on.
int cuda_stream_device(cudaStream_t stream);

}  // namespace fanout
