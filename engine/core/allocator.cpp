#include "engine/core/allocator.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/deferred_frees.h"

namespace fanout {

namespace {

constexpr size_t kCpuAlignment = 64;

void* host_aligned_alloc(size_t bytes) {
  if (bytes > SIZE_MAX - kCpuAlignment) return nullptr;  // no such memory anywhere
  size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  return std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
}

class CpuAllocator final : public Allocator {
 public:
  using Allocator::Allocator;

 protected:
  void* raw_allocate(size_t bytes) override { return host_aligned_alloc(bytes); }
  void raw_deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
};

// host_allocator(): the same memory as a CPU device's, under its own accounting.
class HostAllocator final : public Allocator {
 public:
  HostAllocator() : Allocator("the host") {}

 protected:
  void* raw_allocate(size_t bytes) override { return host_aligned_alloc(bytes); }
  void raw_deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
};

// Note [CUDA allocation ordering]: device memory comes from the device's own
// caching pool (cuda_pool_allocate) and is usable on any stream once handed out.
// A free never waits for the device: the block is held with a fence, one event on
// every live stream (queued work of any stream or device may still read or write
// it: kernels, peer copies, collectives), and goes back to the pool once all of
// them have passed, found at the next allocation or free (DeferredFrees). Only an
// allocation that finds the device full waits, for the held blocks, and tries again.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(Device device)
      : Allocator(device),
        frees_({cuda_fence_all_streams, cuda_event_query, cuda_event_synchronize,
                cuda_fence_recycle,
                [index = device.index](void* p) { cuda_pool_release(p, index); }}) {}

 protected:
  void* raw_allocate(size_t bytes) override {
    const int index = device().index;
    const size_t n = bytes == 0 ? 256 : bytes;
    frees_.reclaim();
    if (void* p = cuda_pool_allocate(n, index)) return p;
    if (frees_.drain() == 0) return nullptr;
    return cuda_pool_allocate(n, index);
  }
  void raw_deallocate(void* ptr, size_t bytes) noexcept override {
    frees_.defer(ptr, bytes);
    try {
      frees_.reclaim();
    } catch (...) {  // a failed device: what is held stays held
    }
  }

 private:
  DeferredFrees frees_;
};

}  // namespace

const char* mem_tag_name(MemTag tag) {
  switch (tag) {
    case MemTag::other:
      return "other";
    case MemTag::params:
      return "params";
    case MemTag::grads:
      return "grads";
    case MemTag::optimizer:
      return "optimizer";
    case MemTag::activations:
      return "activations";
    case MemTag::comm:
      return "comm";
    case MemTag::data:
      return "data";
  }
  return "?";
}

void Allocator::Counter::raise_peak(size_t now) {
  size_t prev = peak.load();
  while (now > prev && !peak.compare_exchange_weak(prev, now)) {
  }
}

namespace {

// "out of memory on cpu:1 (--device-memory 512.0 MiB): allocating 12.0 MiB of
// activations with 506.3 MiB live needs 518.3 MiB". Sizes that round to the same
// text as the capacity are given in bytes, so the line never reads "1.0 MiB
// needs 1.0 MiB".
// The host allocator has no flag: its capacity reads "(capacity 512.0 MiB)".
[[noreturn]] void throw_over_capacity(const Allocator& a, MemTag tag, size_t bytes, size_t live,
                                      size_t capacity) {
  const bool overflow = bytes > SIZE_MAX - live;
  const size_t need = overflow ? SIZE_MAX : live + bytes;
  const bool exact = bytes_str(need) == bytes_str(capacity);
  auto size = [&](size_t b) { return exact ? std::to_string(b) + " B" : bytes_str(b); };
  const char* flag = a.device().is_bare() ? " (capacity " : " (--device-memory ";
  detail::throw_error(detail::str_cat("out of memory on ", a.name(), flag, size(capacity),
                                      "): allocating ", size(bytes), " of ", mem_tag_name(tag),
                                      " with ", size(live), " live needs ",
                                      overflow ? std::string("more than 16 EiB") : size(need)));
}

[[noreturn]] void throw_exhausted(const Allocator& a, MemTag tag, size_t bytes, size_t live) {
  detail::throw_error(
      detail::str_cat("out of memory on ", a.name(), ": allocating ", bytes_str(bytes), " of ",
                      mem_tag_name(tag), " with ", bytes_str(live), " live failed (the ",
                      a.device().is_cpu() ? "machine" : "device", " has no more free memory)"));
}

}  // namespace

// Note [Stream graphs]: a recording thread's memory (allocator.h).
namespace detail {

GraphRecording*& graph_recording_of_this_thread() {
  thread_local GraphRecording* recording = nullptr;
  return recording;
}

void GraphRecording::fail(std::string why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.empty()) failure_ = std::move(why);
}

std::string GraphRecording::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void graph_recording_release(GraphRecording& r) noexcept {
  std::vector<GraphRecording::Held> held;
  held.swap(r.held);
  for (const GraphRecording::Held& h : held) h.allocator->deallocate(h.ptr, h.bytes, h.tag);
}

}  // namespace detail

// Note [Device capacity]: the capacity check and the reservation of the bytes on
// the live counters happen under the accounting lock before any memory is taken,
// so threads allocating on one device at once can never take it past the capacity
// together; a refused or failed allocation gives its reservation back and counts
// nowhere (not in peak, tag or num_allocs). The lock also keeps the total equal to
// the sum of the kinds at every moment, so the total's peak is never above the sum
// of the kinds' peaks (a free on one thread and an allocation of the same size on
// another could otherwise be counted at once in the total, never in their kind).
void* Allocator::allocate(size_t bytes, MemTag tag) {
  if (detail::GraphRecording* r = detail::graph_recording_of_this_thread();
      r != nullptr && r->device == device_) {
    std::string why = detail::str_cat("it allocates ", bytes_str(bytes), " of ", mem_tag_name(tag),
                                      " on ", name_);
    r->fail(why);
    detail::throw_error(detail::str_cat(r->stream, ": a recorded graph cannot keep memory that ",
                                        "the host allocates while recording (", why, ")"));
  }
  Counter& kind = tags_[static_cast<int>(tag)];
  size_t live = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t cap = capacity_.load();
    live = total_.live.load();
    if (cap != 0 && (bytes > cap || live > cap - bytes))
      throw_over_capacity(*this, tag, bytes, live, cap);
    if (bytes > SIZE_MAX - live) throw_exhausted(*this, tag, bytes, live);
    total_.live.fetch_add(bytes);
    kind.live.fetch_add(bytes);
  }
  auto give_back = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    total_.live.fetch_sub(bytes);
    kind.live.fetch_sub(bytes);
  };
  void* p = nullptr;
  try {
    p = raw_allocate(bytes);
  } catch (const Error& e) {
    give_back();
    detail::throw_error(detail::str_cat("allocating ", bytes_str(bytes), " of ", mem_tag_name(tag),
                                        " on ", name_, " with ", bytes_str(live),
                                        " live failed: ", e.what()));
  } catch (...) {
    give_back();
    throw;
  }
  if (p == nullptr) {
    give_back();
    throw_exhausted(*this, tag, bytes, live);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    total_.raise_peak(total_.live.load());
    kind.raise_peak(kind.live.load());
  }
  num_allocs_.fetch_add(1);
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes, MemTag tag) noexcept {
  if (ptr == nullptr) return;
  if (detail::GraphRecording* r = detail::graph_recording_of_this_thread();
      r != nullptr && r->device == device_) {
    bool held = false;
    try {  // held until the recording ends (its work may still be replayed)
      r->held.push_back({this, ptr, bytes, tag});
      held = true;
      r->fail(detail::str_cat("it frees ", bytes_str(bytes), " of ", mem_tag_name(tag), " on ",
                              name_, " that recorded work may use"));
    } catch (...) {  // no memory to hold it (freed now) or to say why
      try {
        r->fail("it frees memory that recorded work may use");
      } catch (...) {
      }
    }
    if (held) return;
  }
  raw_deallocate(ptr, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  total_.sub(bytes);
  tags_[static_cast<int>(tag)].sub(bytes);
}

AllocatorStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  AllocatorStats s;
  s.total = {total_.live.load(), total_.peak.load()};
  for (int i = 0; i < kNumMemTags; ++i) s.by_tag[i] = {tags_[i].live.load(), tags_[i].peak.load()};
  s.num_allocs = num_allocs_.load();
  return s;
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Counter& c : tags_) c.peak.store(c.live.load());
  total_.peak.store(total_.live.load());
}

Allocator& allocator_for(Device device) {
  FANOUT_ASSERT(!device.is_bare(), "allocator for unresolved device ", device.str());
  static std::mutex mu;
  static auto* registry = new std::map<std::pair<int, int>, std::unique_ptr<Allocator>>();
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  auto it = registry->find(key);
  if (it == registry->end()) {
    std::unique_ptr<Allocator> a;
    if (device.is_cpu()) {
      a = std::make_unique<CpuAllocator>(device);
    } else {
      a = std::make_unique<CudaAllocator>(device);
    }
    it = registry->emplace(key, std::move(a)).first;
  }
  return *it->second;
}

Allocator& host_allocator() {
  static auto* host = new HostAllocator();
  return *host;
}

// --- HostBuffer -------------------------------------------------------------

HostBuffer::HostBuffer(int64_t count, MemTag tag) : count_(count), tag_(tag) {
  FANOUT_ASSERT(count >= 0, "a host buffer of ", count, " floats");
  if (count == 0) return;
  // More floats than size_t bytes can count: refused as the out of memory it is.
  const bool fits = static_cast<uint64_t>(count) <= SIZE_MAX / sizeof(float);
  const size_t bytes = fits ? static_cast<size_t>(count) * sizeof(float) : SIZE_MAX;
  data_ = static_cast<float*>(host_allocator().allocate(bytes, tag));
}

HostBuffer::~HostBuffer() {
  release();
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      count_(std::exchange(other.count_, 0)),
      tag_(other.tag_) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    count_ = std::exchange(other.count_, 0);
    tag_ = other.tag_;
  }
  return *this;
}

void HostBuffer::release() noexcept {
  if (data_ != nullptr)
    host_allocator().deallocate(data_, static_cast<size_t>(count_) * sizeof(float), tag_);
  data_ = nullptr;
  count_ = 0;
}

// ---

std::string bytes_str(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace fanout
