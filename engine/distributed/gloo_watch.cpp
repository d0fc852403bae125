#include "engine/distributed/gloo_watch.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <vector>

namespace fanout::distributed {

GlooWatch::GlooWatch(Rendezvous& rendezvous)
    : rendezvous_(rendezvous), thread_([this] { loop(); }) {}

GlooWatch::~GlooWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool GlooWatch::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

void GlooWatch::enter(gloo::transport::UnboundBuffer* b) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fired_) throw std::runtime_error(kEnded);
  if (waiting_.empty()) {
    ++stretch_;
    cv_.notify_all();
  }
  waiting_.insert(b);
}

void GlooWatch::leave(gloo::transport::UnboundBuffer* b) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.erase(waiting_.find(b));
}

void GlooWatch::wait_recv(gloo::transport::UnboundBuffer& b, Deadline deadline) {
  wait(b, deadline, false);
}

void GlooWatch::wait_send(gloo::transport::UnboundBuffer& b, Deadline deadline) {
  wait(b, deadline, true);
}

void GlooWatch::wait(gloo::transport::UnboundBuffer& b, Deadline deadline, bool send) {
  const auto timeout =
      std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - std::chrono::steady_clock::now()));
  enter(&b);
  bool done = false;
  try {
    done = send ? b.waitSend(timeout) : b.waitRecv(timeout);
  } catch (...) {
    leave(&b);
    throw;
  }
  leave(&b);
  if (!done) throw std::runtime_error(kEnded);
}

void GlooWatch::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (!waiting_.empty() && !fired_); });
    if (stop_) return;
    // Ask only once the same stretch of waiting has lasted kLook.
    const uint64_t stretch = stretch_;
    if (cv_.wait_for(lock, kLook, [&] { return stop_ || waiting_.empty() || stretch_ != stretch; }))
      continue;
    lock.unlock();
    std::optional<std::vector<int>> dead = rendezvous_.dead_ranks_known(kLook * 4);
    lock.lock();
    if (!dead || dead->empty()) continue;
    // abortWait* sets a flag the buffer's next or current wait consumes, so a
    // wait that registered but has not begun still ends.
    fired_ = true;
    for (gloo::transport::UnboundBuffer* b : waiting_) {
      b->abortWaitRecv();
      b->abortWaitSend();
    }
  }
}

void keep_for_process(std::shared_ptr<void> what) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::shared_ptr<void>>();  // never freed, on purpose
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(what));
}

}  // namespace fanout::distributed
