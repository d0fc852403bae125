#pragma once
// ThreadPool: one long-lived worker thread per device entry (threads are not
// re-created per step). run_on_devices(fn) runs fn(i) on every entry's worker at
// once, with that device made current, waits for all of them, and rethrows the
// first failure naming its device; the other devices always run to the end.
// Dedicated threads rather than tasks: device tasks block on streams and
// collectives, and oneTBB guarantees no concurrency between blocking tasks.

#include <functional>
#include <memory>
#include <vector>

#include "engine/core/device.h"

namespace fanout {

class Worker;

class ThreadPool {
 public:
  explicit ThreadPool(std::vector<Device> devices);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  const std::vector<Device>& devices() const { return devices_; }

  void run_on_devices(const std::function<void(int)>& fn);
  // Only the entries listed in `which` (e.g. the replicas that got a chunk).
  void run_on(const std::vector<int>& which, const std::function<void(int)>& fn);

 private:
  std::vector<Device> devices_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

// The device the calling pool worker serves (cpu:0 on any other thread).
Device current_device();

}  // namespace fanout
