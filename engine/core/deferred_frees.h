#pragma once
// DeferredFrees: device blocks given back while queued work may still use them.
// Each is held with a fence (markers that pass once the work queued before the free
// has run) and handed to `release` once its fence has passed: at a later reclaim(),
// which never blocks, or at drain(), which waits. No free waits for the device; an
// allocation short of memory drains. The CUDA allocator fences with one event per
// stream (Note [CUDA allocation ordering], allocator.cpp); tests use fake markers.

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace fanout {

class DeferredFrees {
 public:
  struct Hooks {
    std::function<std::vector<void*>()> fence;  // markers for "everything queued until now"
    std::function<bool(void*)> passed;          // has the marker passed; never blocks
    std::function<void(void*)> wait;            // blocks until the marker has passed
    std::function<void(void*)> recycle;         // the marker is no longer needed
    std::function<void(void*)> release;         // the block is idle: back to its pool
  };
  explicit DeferredFrees(Hooks hooks) : hooks_(std::move(hooks)) {}
  DeferredFrees(const DeferredFrees&) = delete;
  DeferredFrees& operator=(const DeferredFrees&) = delete;

  // Holds `block` until the work queued now has run. When no fence can be taken
  // (the device failed) the block is never released: leaking it is safer than
  // handing it out while a kernel may still write it.
  void defer(void* block, size_t bytes) noexcept;
  // Releases every held block whose fence has passed; the bytes released.
  size_t reclaim();
  // Waits for every fence and releases every held block; the bytes released.
  size_t drain();

  size_t held_bytes() const;
  size_t held_blocks() const;

 private:
  struct Held {
    void* block;
    size_t bytes;
    std::vector<void*> markers;
  };
  void release_front();  // mu_ held

  Hooks hooks_;
  mutable std::mutex mu_;
  std::deque<Held> held_;  // in fence order
  size_t held_bytes_ = 0;
};

}  // namespace fanout
