#include "engine/core/cuda_runtime.h"

#include "engine/core/check.h"

#ifdef FANOUT_HAS_CUDA
#include <cuda_runtime_api.h>

#include "engine/core/cuda_check.h"
#endif

namespace fanout {

#ifdef FANOUT_HAS_CUDA

namespace {
// Note [No CUDA driver]: cudaGetDeviceCount fails with "driver version is
// insufficient" or "no CUDA-capable device" on machines without a GPU; that is
// simply zero devices, and cudaGetLastError() clears the error so nothing leaks.
struct Discovery {
  int count = 0;
  std::string reason;
  Discovery() {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();
      reason = std::string("no CUDA device was found (") + cudaGetErrorString(err) + ")";
      n = 0;
    } else if (n == 0) {
      reason = "no CUDA device was found";
    }
    count = n;
  }
};
const Discovery& discovery() {
  static Discovery d;
  return d;
}
}  // namespace

bool cuda_compiled() {
  return true;
}
int cuda_device_count() {
  return discovery().count;
}
std::string cuda_unavailable_reason() {
  return discovery().reason;
}

CudaDeviceInfo cuda_device_info(int index) {
  FANOUT_CHECK(index >= 0 && index < cuda_device_count(), "cuda:", index, " is not available");
  cudaDeviceProp prop{};
  FANOUT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return {prop.name, prop.totalGlobalMem, prop.multiProcessorCount, prop.major, prop.minor};
}

void cuda_set_device(int index) {
  FANOUT_CUDA_CHECK(cudaSetDevice(index));
}

void* cuda_stream_create(int device) {
  FANOUT_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  FANOUT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void cuda_stream_destroy(void* stream) noexcept {
  cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}
void cuda_stream_synchronize(void* stream) {
  FANOUT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}
void* cuda_event_create(int device) {
  FANOUT_CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t e = nullptr;
  FANOUT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void cuda_event_destroy(void* event) noexcept {
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}
void cuda_event_record(void* event, void* stream) {
  FANOUT_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}
void cuda_stream_wait_event(void* stream, void* event) {
  FANOUT_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}
void cuda_event_synchronize(void* event) {
  FANOUT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}
bool cuda_event_query(void* event) {
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) return false;
  FANOUT_CUDA_CHECK(err);
  return true;
}
void* cuda_malloc_async(size_t bytes, int device, void* stream) {
  FANOUT_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  FANOUT_CUDA_CHECK(cudaMallocAsync(&p, bytes, static_cast<cudaStream_t>(stream)));
  return p;
}
void cuda_free_async(void* ptr, int device, void* stream) noexcept {
  cudaSetDevice(device);
  cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream));
}
void cuda_device_synchronize(int device) noexcept {
  cudaSetDevice(device);
  cudaDeviceSynchronize();
}
void cuda_memcpy_async(void* dst, const void* src, size_t bytes, CudaCopy kind, void* stream) {
  cudaMemcpyKind k = kind == CudaCopy::host_to_device   ? cudaMemcpyHostToDevice
                     : kind == CudaCopy::device_to_host ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
  FANOUT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream)));
}
void cuda_memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device,
                            size_t bytes, void* stream) {
  FANOUT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes,
                                        static_cast<cudaStream_t>(stream)));
}
void cuda_memset_async(void* dst, int value, size_t bytes, void* stream) {
  FANOUT_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
}

#else  // no CUDA backend in this build

namespace {
[[noreturn]] void no_cuda() {
  FANOUT_ASSERT(false, "CUDA call in a build without the CUDA backend");
  throw;  // unreachable
}
}  // namespace

bool cuda_compiled() {
  return false;
}
int cuda_device_count() {
  return 0;
}
std::string cuda_unavailable_reason() {
  return "this fanout binary was built without CUDA";
}
CudaDeviceInfo cuda_device_info(int) {
  no_cuda();
}
void cuda_set_device(int) {
  no_cuda();
}
void* cuda_stream_create(int) {
  no_cuda();
}
void cuda_stream_destroy(void*) noexcept {}
void cuda_stream_synchronize(void*) {
  no_cuda();
}
void* cuda_event_create(int) {
  no_cuda();
}
void cuda_event_destroy(void*) noexcept {}
void cuda_event_record(void*, void*) {
  no_cuda();
}
void cuda_stream_wait_event(void*, void*) {
  no_cuda();
}
void cuda_event_synchronize(void*) {
  no_cuda();
}
bool cuda_event_query(void*) {
  no_cuda();
}
void* cuda_malloc_async(size_t, int, void*) {
  no_cuda();
}
void cuda_free_async(void*, int, void*) noexcept {}
void cuda_device_synchronize(int) noexcept {}
void cuda_memcpy_async(void*, const void*, size_t, CudaCopy, void*) {
  no_cuda();
}
void cuda_memcpy_peer_async(void*, int, const void*, int, size_t, void*) {
  no_cuda();
}
void cuda_memset_async(void*, int, size_t, void*) {
  no_cuda();
}

#endif

}  // namespace fanout
