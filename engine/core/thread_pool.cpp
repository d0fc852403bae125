#include "engine/core/thread_pool.h"

#include <condition_variable>
#include <exception>
#include <mutex>

#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/worker.h"

namespace fanout {

namespace {
thread_local Device tls_device = cpu_device(0);
}  // namespace

Device current_device() {
  return tls_device;
}

ThreadPool::ThreadPool(std::vector<Device> devices) : devices_(std::move(devices)) {
  FANOUT_CHECK(!devices_.empty(), "a thread pool needs at least one device");
  for (size_t i = 0; i < devices_.size(); ++i) {
    FANOUT_ASSERT(!devices_[i].is_bare(), "unresolved device ", devices_[i].str());
    workers_.push_back(std::make_unique<Worker>(devices_[i].str() + " host"));
  }
}

ThreadPool::~ThreadPool() = default;

void ThreadPool::run_on_devices(const std::function<void(int)>& fn) {
  std::vector<int> all(devices_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  run_on(all, fn);
}

void ThreadPool::run_on(const std::vector<int>& which, const std::function<void(int)>& fn) {
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = which.size();
  std::exception_ptr first;
  int first_index = -1;
  for (int i : which) {
    FANOUT_ASSERT(i >= 0 && i < size(), "device entry ", i, " out of range");
    workers_[i]->post([&, i] {
      std::exception_ptr err;
      try {
        tls_device = devices_[i];
        if (devices_[i].is_cuda()) cuda_set_device(devices_[i].index);
        fn(i);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      // Moved, not copied: once `remaining` is 0 the caller reads and frees the
      // exception, so this thread must hold no reference to it by then.
      if (err && !first) first = std::move(err), first_index = i;
      if (--remaining == 0) cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
  }
  if (!first) return;
  std::string where = devices_[first_index].str();
  try {
    std::rethrow_exception(first);
  } catch (const Error& e) {
    // Stream errors already carry their stream's name ("cpu:1 compute: ...").
    std::string msg = e.what();
    throw Error(msg.rfind(where, 0) == 0 ? msg : where + ": " + msg);
  } catch (const InternalError& e) {
    throw InternalError(where + ": " + e.what());
  } catch (const std::exception& e) {
    throw Error(where + ": " + e.what());
  } catch (...) {
    throw Error(where + ": unknown exception");
  }
}

}  // namespace fanout
