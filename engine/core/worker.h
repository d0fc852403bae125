#pragma once
// Worker: one long-lived std::thread that runs posted closures in order, from a
// oneTBB concurrent queue. The building block of CPU streams (one worker per
// stream) and of the ThreadPool (one worker per device).

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <tbb/concurrent_queue.h>

namespace fanout {

class Worker {
 public:
  explicit Worker(std::string name);
  ~Worker();  // runs everything already posted, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // fn must not throw: wrap it (streams and the pool capture exceptions themselves).
  void post(std::function<void()> fn);
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  // Pages from malloc, not oneTBB's default cache_aligned_allocator: that one
  // is served by libtbbmalloc, which ThreadSanitizer cannot see, so a page
  // freed by this thread and reused by a poster looked like a data race
  // (docs/sanitizers.md). A page holds 8 closures; the allocator is not hot.
  tbb::concurrent_bounded_queue<std::function<void()>, std::allocator<std::function<void()>>>
      queue_;
  std::thread thread_;
};

}  // namespace fanout
