#pragma once
// One Allocator per device, with byte accounting readable at any time: live and
// peak bytes in total and per MemTag (params, grads, optimizer state, ...), so the
// engine can report where each device's memory goes. CPU: 64-byte aligned host
// memory. CUDA: a caching pool per device whose frees never wait for the device
// (Note [CUDA allocation ordering], allocator.cpp).
// An optional capacity caps a device's live bytes (a CPU device standing for a GPU
// of that size: `--device-memory`); going past it throws fanout::Error.

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

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

class Allocator {
 public:
  explicit Allocator(Device device) : device_(device) {}
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

  Device device() const { return device_; }
  AllocatorStats stats() const;
  // Peak := live, for every tag (to measure one phase).
  void reset_peak();

 protected:
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
  Counter total_;
  std::array<Counter, kNumMemTags> tags_;
  std::atomic<size_t> num_allocs_{0};
  std::atomic<size_t> capacity_{0};
  mutable std::mutex mu_;  // the counters change together (Note [Device capacity])
};

// The process-wide allocator of `device` (created on first use, never destroyed).
Allocator& allocator_for(Device device);

// "12.3 MiB"
std::string bytes_str(size_t bytes);

}  // namespace fanout
