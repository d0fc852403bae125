#pragma once
// The few CUDA runtime calls engine/core needs, behind a header that does not
// include CUDA: device discovery (0 devices when the build has no CUDA or the
// machine no driver, silently), and thin wrappers for streams, events, memory.
// In a build without CUDA every wrapper except discovery throws InternalError.

#include <cstddef>
#include <string>
#include <vector>

namespace fanout {

struct CudaDeviceInfo {
  std::string name;
  size_t total_bytes = 0;
  int sm_count = 0;
  int major = 0, minor = 0;
};

bool cuda_compiled();                   // was this binary built with the CUDA backend
int cuda_device_count();                // 0 without CUDA build, driver or devices; never throws
std::string cuda_unavailable_reason();  // why cuda_device_count() is 0, one line
CudaDeviceInfo cuda_device_info(int index);

// Opaque handles: cudaStream_t / cudaEvent_t as void*. Every call binds the device
// it works on and gives the thread its previous one back (Note [Device guards]),
// except cuda_set_device, with which a device thread pins its device for good.
void cuda_set_device(int index);
// A non-blocking stream, known to cuda_fence_all_streams until it is destroyed.
void* cuda_stream_create(int device);
void cuda_stream_destroy(void* stream) noexcept;
void cuda_stream_synchronize(void* stream);
void* cuda_event_create(int device);
void cuda_event_destroy(void* event) noexcept;
void cuda_event_record(void* event, void* stream);
void cuda_stream_wait_event(void* stream, void* event);
void cuda_event_synchronize(void* event);
bool cuda_event_query(void* event);
// An event that records a time (the others are made without, which is cheaper), and
// the milliseconds between two recorded timing events once both have passed.
void* cuda_timing_event_create(int device);
float cuda_event_elapsed_ms(void* start, void* end);

// Device memory from the device's own caching pool (its release threshold keeps
// freed memory mapped for the next step), usable on any stream once returned;
// nullptr when the device is out of memory, with the error cleared so that no
// later launch check reports it. Only the Allocator calls these (allocator.cpp).
void* cuda_pool_allocate(size_t bytes, int device);
// Back to the pool; only for a block no queued work uses any more.
void cuda_pool_release(void* ptr, int device) noexcept;

// An event recorded now on every live stream of every device: once all have passed,
// everything queued before the call has run. The events are pooled: give each back
// with cuda_fence_recycle once it is no longer needed.
std::vector<void*> cuda_fence_all_streams();
void cuda_fence_recycle(void* event) noexcept;

// Stream capture (Note [Stream graphs] in stream_graph.cpp), in the capturing
// thread's mode (cudaStreamCaptureModeThreadLocal). begin waits for the stream's
// queued work first: while it records, cuda_fence_all_streams passes it by. end
// returns the instantiated graph (cudaGraphExec_t) or throws why CUDA refused it;
// abort drops a recording. The graph runs on any stream of its device.
void cuda_stream_begin_capture(void* stream);
void* cuda_stream_end_capture(void* stream);
void cuda_stream_abort_capture(void* stream) noexcept;
// Whether `stream` records a graph now (whoever began it).
bool cuda_stream_capturing(void* stream);
void cuda_graph_launch(void* graph, void* stream);
void cuda_graph_destroy(void* graph) noexcept;

enum class CudaCopy { host_to_device, device_to_host, device_to_device };
void cuda_memcpy_async(void* dst, const void* src, size_t bytes, CudaCopy kind, void* stream);
void cuda_memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device,
                            size_t bytes, void* stream);
void cuda_memset_async(void* dst, int value, size_t bytes, void* stream);
// rows of width_bytes each, dpitch and spitch bytes apart, on one device.
void cuda_memcpy_2d_async(void* dst, size_t dpitch, const void* src, size_t spitch,
                          size_t width_bytes, size_t rows, void* stream);

}  // namespace fanout
