#include "engine/core/cuda_runtime.h"

#include "engine/core/check.h"

#ifdef FANOUT_HAS_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "engine/core/cuda_check.h"
#include "engine/core/cuda_guard.h"
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

// Note [Device guards]: a device thread (ThreadPool) pins its device for its
// lifetime. Every other CUDA call binds the device it works on for its own duration
// and then gives the thread its previous device back, so a thread that drives
// several devices in a loop (the coordinating thread: unit stores, local
// collectives) never leaves one current by accident, and a device thread that makes
// a stream for another device stays on its own. The previous device is restored
// only when this process already has a context on it: a thread that never chose a
// device reports cuda:0, and switching back to cuda:0 would create a context there
// (hundreds of MiB) on a GPU the run may not use.
namespace {
std::atomic<uint64_t> g_devices_in_use{0};  // bit d: this process made cuda:d current

void note_in_use(int device) {
  if (device >= 0 && device < 64) g_devices_in_use.fetch_or(uint64_t{1} << device);
}
bool in_use(int device) {
  return device >= 0 && device < 64 && (g_devices_in_use.load() >> device & 1) != 0;
}
}  // namespace

CudaDeviceGuard::CudaDeviceGuard(int device) {
  int current = -1;
  FANOUT_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device) return;
  FANOUT_CUDA_CHECK(cudaSetDevice(device));
  note_in_use(device);
  if (in_use(current)) previous_ = current;
}

CudaDeviceGuard::CudaDeviceGuard(cudaStream_t stream)
    : CudaDeviceGuard(cuda_stream_device(stream)) {}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ >= 0)
    cudaSetDevice(previous_);  // on a device the process already uses: cannot fail
}

void cuda_set_device(int index) {
  FANOUT_CUDA_CHECK(cudaSetDevice(index));
  note_in_use(index);
}

// --- streams and fences -------------------------------------------------------

namespace {
// Every live stream (for fences), and idle fence events per device.
struct Streams {
  std::mutex mu;
  std::map<cudaStream_t, int> live;                     // stream -> device
  std::set<cudaStream_t> capturing;                     // recording a graph: no fences
  std::map<int, std::vector<cudaEvent_t>> idle_events;  // device -> pooled events
  std::map<cudaEvent_t, int> event_device;
};
Streams& streams() {
  static auto* s = new Streams();  // never destroyed: streams may outlive static destruction
  return *s;
}
}  // namespace

// Our streams' devices come from the registry: cudaStreamGetDevice is refused
// while the stream records a graph (cudaErrorStreamCaptureUnsupported).
int cuda_stream_device(cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(streams().mu);
    auto it = streams().live.find(stream);
    if (it != streams().live.end()) return it->second;
  }
  int device = -1;
  FANOUT_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  return device;
}

void* cuda_stream_create(int device) {
  CudaDeviceGuard guard(device);
  cudaStream_t s = nullptr;
  FANOUT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::lock_guard<std::mutex> lock(streams().mu);
  streams().live[s] = device;
  return s;
}
void cuda_stream_destroy(void* stream) noexcept {
  auto s = static_cast<cudaStream_t>(stream);
  {
    std::lock_guard<std::mutex> lock(streams().mu);
    streams().live.erase(s);
  }
  cudaStreamDestroy(s);
}
void cuda_stream_synchronize(void* stream) {
  FANOUT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

std::vector<void*> cuda_fence_all_streams() {
  Streams& st = streams();
  std::lock_guard<std::mutex> lock(st.mu);
  std::vector<void*> events;
  events.reserve(st.live.size());
  try {
    for (auto [s, device] : st.live) {
      // A recording stream runs nothing now (its earlier work finished before it
      // began), and an event recorded there would join the graph.
      if (st.capturing.count(s) != 0) continue;
      std::vector<cudaEvent_t>& idle = st.idle_events[device];
      cudaEvent_t e = nullptr;
      if (idle.empty()) {
        CudaDeviceGuard guard(device);
        FANOUT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        st.event_device[e] = device;
      } else {
        e = idle.back();
        idle.pop_back();
      }
      events.push_back(e);  // before the record: a failed record still gives it back
      FANOUT_CUDA_CHECK(cudaEventRecord(e, s));
    }
  } catch (...) {
    for (void* e : events)
      st.idle_events[st.event_device[static_cast<cudaEvent_t>(e)]].push_back(
          static_cast<cudaEvent_t>(e));
    throw;
  }
  return events;
}

void cuda_fence_recycle(void* event) noexcept {
  Streams& st = streams();
  auto e = static_cast<cudaEvent_t>(event);
  try {
    std::lock_guard<std::mutex> lock(st.mu);
    st.idle_events[st.event_device.at(e)].push_back(e);
  } catch (...) {  // no memory to pool it: destroy it instead
    cudaEventDestroy(e);
  }
}

// --- graphs -------------------------------------------------------------------

void cuda_stream_begin_capture(void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  FANOUT_CUDA_CHECK(cudaStreamSynchronize(s));
  Streams& st = streams();
  std::lock_guard<std::mutex> lock(st.mu);  // no fence between the two
  FANOUT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  st.capturing.insert(s);
}

void* cuda_stream_end_capture(void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  cudaGraph_t graph = nullptr;
  cudaError_t err;
  {
    Streams& st = streams();
    std::lock_guard<std::mutex> lock(st.mu);
    err = cudaStreamEndCapture(s, &graph);
    st.capturing.erase(s);
  }
  if (err != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a refused recording is reported here, not at the next launch
    throw Error(std::string("CUDA refused the recorded graph: ") +
                cudaGetErrorString(err != cudaSuccess ? err : cudaErrorStreamCaptureInvalidated));
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("CUDA could not instantiate the recorded graph: ") +
                cudaGetErrorString(err));
  }
  return exec;
}

void cuda_stream_abort_capture(void* stream) noexcept {
  auto s = static_cast<cudaStream_t>(stream);
  Streams& st = streams();
  std::lock_guard<std::mutex> lock(st.mu);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
  }
  st.capturing.erase(s);
  cudaGetLastError();
}

bool cuda_stream_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FANOUT_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

void cuda_graph_launch(void* graph, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  FANOUT_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), s));
}

void cuda_graph_destroy(void* graph) noexcept {
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
}

// --- events -------------------------------------------------------------------

void* cuda_event_create(int device) {
  CudaDeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  FANOUT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void* cuda_timing_event_create(int device) {
  CudaDeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  FANOUT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
  return e;
}
float cuda_event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  FANOUT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
  FANOUT_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}
void cuda_event_destroy(void* event) noexcept {
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}
void cuda_event_record(void* event, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  FANOUT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), s));
}
void cuda_stream_wait_event(void* stream, void* event) {
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  FANOUT_CUDA_CHECK(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(event), 0));
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

// --- memory -------------------------------------------------------------------

namespace {
// Per device: a pool of its own (so ops' stream-ordered scratch in the default pool
// never lends it a block still in use on another stream) and a private stream that
// only ever allocates and releases idle blocks, so synchronising it waits for
// nothing else.
struct DevicePool {
  cudaMemPool_t pool = nullptr;
  cudaStream_t stream = nullptr;
};

DevicePool& device_pool(int device) {
  static std::mutex mu;
  static auto* pools = new std::map<int, DevicePool>();
  std::lock_guard<std::mutex> lock(mu);
  DevicePool& p = (*pools)[device];
  if (p.pool) return p;
  CudaDeviceGuard guard(device);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  FANOUT_CUDA_CHECK(cudaMemPoolCreate(&p.pool, &props));
  // Keep freed memory mapped: without a threshold every synchronisation unmaps the
  // pool's idle memory and the next step maps it again.
  uint64_t keep = UINT64_MAX;
  FANOUT_CUDA_CHECK(cudaMemPoolSetAttribute(p.pool, cudaMemPoolAttrReleaseThreshold, &keep));
  // The default pool serves the ops' scratch (ops/cuda/common.cuh): cache it too.
  cudaMemPool_t fallback = nullptr;
  FANOUT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&fallback, device));
  FANOUT_CUDA_CHECK(cudaMemPoolSetAttribute(fallback, cudaMemPoolAttrReleaseThreshold, &keep));
  FANOUT_CUDA_CHECK(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
  return p;
}
}  // namespace

void* cuda_pool_allocate(size_t bytes, int device) {
  DevicePool& p = device_pool(device);
  CudaDeviceGuard guard(device);
  void* ptr = nullptr;
  cudaError_t err = cudaMallocFromPoolAsync(&ptr, bytes, p.pool, p.stream);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // handled here: the next launch check must not see it
    return nullptr;
  }
  FANOUT_CUDA_CHECK(err);
  // The stream holds only allocations and releases of idle blocks: this returns at
  // once, and then any stream may use the block.
  FANOUT_CUDA_CHECK(cudaStreamSynchronize(p.stream));
  return ptr;
}

void cuda_pool_release(void* ptr, int device) noexcept {
  try {
    DevicePool& p = device_pool(device);
    CudaDeviceGuard guard(device);
    cudaFreeAsync(ptr, p.stream);
  } catch (...) {  // the device failed: the block is lost with it
  }
}

// --- copies -------------------------------------------------------------------

void cuda_memcpy_async(void* dst, const void* src, size_t bytes, CudaCopy kind, void* stream) {
  cudaMemcpyKind k = kind == CudaCopy::host_to_device   ? cudaMemcpyHostToDevice
                     : kind == CudaCopy::device_to_host ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  FANOUT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, s));
}
void cuda_memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device,
                            size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  FANOUT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, s));
}
void cuda_memset_async(void* dst, int value, size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  FANOUT_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, s));
}
void cuda_memcpy_2d_async(void* dst, size_t dpitch, const void* src, size_t spitch,
                          size_t width_bytes, size_t rows, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  CudaDeviceGuard guard(s);
  FANOUT_CUDA_CHECK(
      cudaMemcpy2DAsync(dst, dpitch, src, spitch, width_bytes, rows, cudaMemcpyDeviceToDevice, s));
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
void* cuda_timing_event_create(int) {
  no_cuda();
}
float cuda_event_elapsed_ms(void*, void*) {
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
void* cuda_pool_allocate(size_t, int) {
  no_cuda();
}
void cuda_pool_release(void*, int) noexcept {}
std::vector<void*> cuda_fence_all_streams() {
  no_cuda();
}
void cuda_fence_recycle(void*) noexcept {}
void cuda_stream_begin_capture(void*) {
  no_cuda();
}
void* cuda_stream_end_capture(void*) {
  no_cuda();
}
void cuda_stream_abort_capture(void*) noexcept {}
bool cuda_stream_capturing(void*) {
  no_cuda();
}
void cuda_graph_launch(void*, void*) {
  no_cuda();
}
void cuda_graph_destroy(void*) noexcept {}
void cuda_memcpy_async(void*, const void*, size_t, CudaCopy, void*) {
  no_cuda();
}
void cuda_memcpy_peer_async(void*, int, const void*, int, size_t, void*) {
  no_cuda();
}
void cuda_memset_async(void*, int, size_t, void*) {
  no_cuda();
}
void cuda_memcpy_2d_async(void*, size_t, const void*, size_t, size_t, size_t, void*) {
  no_cuda();
}

#endif

}  // namespace fanout
