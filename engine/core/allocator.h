#pragma once
// One Allocator per device, with byte accounting readable at any time: live and
// peak bytes in total and per MemTag (params, grads, optimizer state, ...), so the
// engine can report where each device's memory goes. CPU: 64-byte aligned host
// memory. CUDA: a caching pool per device whose frees never wait for the device
// (Note [CUDA allocation ordering], allocator.cpp).
// An optional capacity caps a device's live bytes (a CPU device standing for a GPU
// of that size: `--device-memory`); going past it throws fanout::Error.
// host_allocator(): host memory that belongs to no device (an offloaded optimizer),
// counted apart from every device's; HostBuffer holds floats of it.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/device.h"

namespace fanout {

enum class MemTag { other, params, grads, optimizer, activations, comm, data };
constexpr int kNumMemTags = 7;
const char* mem_tag_name(MemTag tag);

struct MemStats {
  size_t live = 0, peak = 0;  // bytes
};

struct AllocatorStats {
  MemStats total;
  std::array<MemStats, kNumMemTags> by_tag;
  size_t num_allocs = 0;
  const MemStats& tag(MemTag t) const { return by_tag[static_cast<int>(t)]; }
};

class Allocator;

namespace detail {
// Note [Stream graphs] (stream_graph.cpp): while a thread records a graph on a
// stream of `device`, the memory the recorded work would use must stay where it
// is for every replay. That thread's allocations on the device are refused and its
// frees held (the recording fails either way, with `failure` saying why) until
// the recording ends and releases them. Other threads and devices are unaffected.
struct GraphRecording {
  Device device;
  std::string stream;  // the recording stream's name, for the message
  // The first reason the recording failed (a refused use of memory, a wait, an
  // event), from any thread; empty if none.
  void fail(std::string why);
  std::string failure() const;
  struct Held {
    Allocator* allocator;
    void* ptr;
    size_t bytes;
    MemTag tag;
  };
  std::vector<Held> held;  // the recording thread's only

 private:
  mutable std::mutex mu_;
  std::string failure_;
};
// This thread's recording (null when it records none); set by Stream.
GraphRecording*& graph_recording_of_this_thread();
// Frees what the recording held, now that it is over.
void graph_recording_release(GraphRecording& r) noexcept;
}  // namespace detail

class Allocator {
 public:
  explicit Allocator(Device device) : device_(device), name_(device.str()) {}
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Throws fanout::Error, one line naming the device, the tag and the bytes, when the
  // allocation would take live bytes past capacity() or the memory itself runs out;
  // a refused allocation counts nowhere.
  void* allocate(size_t bytes, MemTag tag = MemTag::other);
  void deallocate(void* ptr, size_t bytes, MemTag tag = MemTag::other) noexcept;

  // The most live bytes allocate() lets this device hold; 0 (the default) is
  // unlimited. A capacity below the bytes already live refuses every allocation
  // until enough is freed.
  void set_capacity(size_t bytes) { capacity_.store(bytes); }
  size_t capacity() const { return capacity_.load(); }

  // A bare `cpu` for host_allocator(), which serves no device.
  Device device() const { return device_; }
  // What its errors call it: "cpu:1", "cuda:0", "the host".
  const std::string& name() const { return name_; }
  AllocatorStats stats() const;
  // Peak := live, for every tag (to measure one phase).
  void reset_peak();

 protected:
  // Host memory of no device (host_allocator()), called `name` in its errors.
  explicit Allocator(std::string name) : device_{DeviceKind::cpu, -1}, name_(std::move(name)) {}
  // nullptr when the memory is exhausted; throws for any other failure.
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_deallocate(void* ptr, size_t bytes) noexcept = 0;

 private:
  struct Counter {
    std::atomic<size_t> live{0}, peak{0};
    void raise_peak(size_t now);
    void sub(size_t bytes) { live.fetch_sub(bytes); }
  };
  Device device_;
  std::string name_;
  Counter total_;
  std::array<Counter, kNumMemTags> tags_;
  std::atomic<size_t> num_allocs_{0};
  std::atomic<size_t> capacity_{0};
  mutable std::mutex mu_;  // the counters change together (Note [Device capacity])
};

// The process-wide allocator of `device` (created on first use, never destroyed).
Allocator& allocator_for(Device device);

// The process-wide allocator of host memory that belongs to no device (the
// offloaded optimizer: Note [Optimizer offload], apps/train/optimizer.cpp):
// 64-byte aligned like a cpu:N device's, counted by none of them; its errors
// say "on the host". Created on first use, never destroyed.
Allocator& host_allocator();

// `count` floats of host_allocator() memory under `tag` (uninitialised; none
// for 0), given back on destruction. Movable, not copyable.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(int64_t count, MemTag tag);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  float* data() const { return data_; }
  int64_t count() const { return count_; }

 private:
  void release() noexcept;
  float* data_ = nullptr;
  int64_t count_ = 0;
  MemTag tag_ = MemTag::other;
};

// "12.3 MiB"
std::string bytes_str(size_t bytes);

}  // namespace fanout
