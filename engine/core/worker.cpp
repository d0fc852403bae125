#include "engine/core/worker.h"

#include "engine/core/check.h"

namespace fanout {

Worker::Worker(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] {
    while (true) {
      std::function<void()> fn;
      queue_.pop(fn);
      if (!fn) return;  // the empty closure posted by the destructor
      fn();
    }
  });
}

Worker::~Worker() {
  queue_.push(std::function<void()>());
  thread_.join();
}

void Worker::post(std::function<void()> fn) {
  FANOUT_ASSERT(fn, "empty closure posted to ", name_);
  queue_.push(std::move(fn));
}

}  // namespace fanout
