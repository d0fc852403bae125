#include "engine/core/deferred_frees.h"

namespace fanout {

// Fences are taken in order (under mu_) on every live stream, so once one has not
// passed, none after it has either (a stream destroyed in between was synchronised
// first): reclaim() stops at the first held block whose fence is still ahead.

void DeferredFrees::defer(void* block, size_t bytes) noexcept {
  if (block == nullptr) return;
  try {
    // The fence is taken under the lock, so held_ stays in fence order.
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back({block, bytes, hooks_.fence()});
    held_bytes_ += bytes;
  } catch (...) {  // no fence (or no memory to note it): leaked on purpose, see the header
  }
}

void DeferredFrees::release_front() {
  Held& h = held_.front();
  for (void* m : h.markers) hooks_.recycle(m);
  hooks_.release(h.block);
  held_bytes_ -= h.bytes;
  held_.pop_front();
}

size_t DeferredFrees::reclaim() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t released = 0;
  while (!held_.empty()) {
    Held& h = held_.front();
    // Markers that passed are given back at once, so a long wait does not query them again.
    while (!h.markers.empty() && hooks_.passed(h.markers.back())) {
      hooks_.recycle(h.markers.back());
      h.markers.pop_back();
    }
    if (!h.markers.empty()) break;
    released += h.bytes;
    release_front();
  }
  return released;
}

size_t DeferredFrees::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t released = 0;
  while (!held_.empty()) {
    for (void* m : held_.front().markers) hooks_.wait(m);
    released += held_.front().bytes;
    release_front();
  }
  return released;
}

size_t DeferredFrees::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

size_t DeferredFrees::held_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.size();
}

}  // namespace fanout
