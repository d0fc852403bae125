#include "engine/core/stream.h"

#include <condition_variable>
#include <cstdint>
#include <future>

#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "engine/core/cpu_device.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/trace.h"
#include "engine/core/worker.h"

namespace fanout {

// --- Stream -----------------------------------------------------------------

Stream::Stream(Device device, std::string name) : device_(device), name_(std::move(name)) {
  FANOUT_ASSERT(!device.is_bare(), "stream on unresolved device ", device.str());
  if (device.is_cpu()) {
    worker_ = std::make_unique<Worker>(name_);
    arena_ = std::make_unique<tbb::task_arena>(cpu_threads_per_device(), 1);
  } else {
    cuda_stream_ = cuda_stream_create(device.index);
  }
}

Stream::~Stream() {
  abort_capture();
  if (worker_) {
    worker_.reset();  // drains the queue and joins
  } else if (cuda_stream_) {
    try {
      cuda_stream_synchronize(cuda_stream_);
    } catch (...) {
    }
    cuda_stream_destroy(cuda_stream_);
  }
}

void Stream::run(const std::function<void()>& fn, Kind kind) {
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (error_ && kind != Kind::marker) return;
  }
  try {
    // Kernels run in the stream's arena (Note [CPU device compute]); markers and
    // blocking host work, which wait on other streams or the network, run outside
    // it so they never hold its threads.
    if (kind == Kind::compute) {
      arena_->execute(fn);
    } else {
      fn();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void Stream::enqueue(std::function<void()> fn) {
  FANOUT_ASSERT(worker_, "enqueue on CUDA stream ", name_, ": launch kernels on cuda_handle()");
  if (record(fn, Kind::compute)) return;
  worker_->post([this, fn = std::move(fn)] { run(fn, Kind::compute); });
}

void Stream::enqueue_blocking(std::function<void()> fn) {
  FANOUT_ASSERT(worker_, "enqueue_blocking on CUDA stream ", name_);
  if (record(fn, Kind::blocking)) return;
  worker_->post([this, fn = std::move(fn)] { run(fn, Kind::blocking); });
}

void Stream::enqueue_marker(std::function<void()> fn) {
  FANOUT_ASSERT(worker_, "marker on CUDA stream ", name_);
  if (record(fn, Kind::marker)) return;
  worker_->post([this, fn = std::move(fn)] { run(fn, Kind::marker); });
}

void Stream::synchronize() {
  refuse_while_recording("waiting for the stream");
  if (worker_) {
    std::promise<void> done;
    std::future<void> f = done.get_future();
    worker_->post([&done] { done.set_value(); });
    f.wait();
    std::exception_ptr err;
    {
      std::lock_guard<std::mutex> lock(error_mu_);
      std::swap(err, error_);
    }
    if (err) {
      try {
        std::rethrow_exception(err);
      } catch (const Error& e) {
        throw Error(name_ + ": " + e.what());
      } catch (const std::exception& e) {
        throw Error(name_ + ": " + e.what());
      }
    }
  } else {
    cuda_stream_synchronize(cuda_stream_);
  }
}

// --- Event ------------------------------------------------------------------

struct Event::CpuState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // host side: how many record() calls
  uint64_t completed = 0;  // stream side: the highest record that ran
  void wait_for(uint64_t id) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return completed >= id; });
  }
};

Event::Event() : cpu_(std::make_shared<CpuState>()) {}

Event::~Event() {
  if (cuda_event_) cuda_event_destroy(cuda_event_);
}

void Event::record(Stream& stream) {
  stream.refuse_while_recording("an event on the stream");
  if (stream.device().is_cpu()) {
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(cpu_->mu);
      id = ++cpu_->recorded;
    }
    stream.enqueue_marker([st = cpu_, id] {
      {
        std::lock_guard<std::mutex> lock(st->mu);
        if (id > st->completed) st->completed = id;
      }
      st->cv.notify_all();
    });
    return;
  }
  if (!cuda_event_) {
    cuda_device_ = stream.device().index;
    cuda_event_ = cuda_event_create(cuda_device_);
  }
  cuda_event_record(cuda_event_, stream.cuda_handle());
}

void Event::wait(Stream& stream) {
  stream.refuse_while_recording("a wait for an event");
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(cpu_->mu);
    id = cpu_->recorded;
  }
  if (stream.device().is_cpu()) {
    if (id > 0) stream.enqueue_marker([st = cpu_, id] { st->wait_for(id); });
    if (cuda_event_) stream.enqueue_marker([e = cuda_event_] { cuda_event_synchronize(e); });
    return;
  }
  if (id > 0) cpu_->wait_for(id);  // a CUDA stream waiting on CPU work: the host waits
  if (cuda_event_) cuda_stream_wait_event(stream.cuda_handle(), cuda_event_);
}

void Event::synchronize() {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(cpu_->mu);
    id = cpu_->recorded;
  }
  cpu_->wait_for(id);
  if (cuda_event_) cuda_event_synchronize(cuda_event_);
}

bool Event::query() {
  {
    std::lock_guard<std::mutex> lock(cpu_->mu);
    if (cpu_->completed < cpu_->recorded) return false;
  }
  return cuda_event_ ? cuda_event_query(cuda_event_) : true;
}

// --- StreamSpan -------------------------------------------------------------

StreamSpan::StreamSpan(Stream& stream, std::string name)
    : stream_(stream), begin_us_(std::make_shared<int64_t>(0)), name_(std::move(name)) {
  if (!Trace::global().enabled()) return;
  active_ = true;
  if (stream_.device().is_cpu()) {
    stream_.enqueue_marker([b = begin_us_] { *b = Trace::global().now_us(); });
  } else {
    *begin_us_ = Trace::global().now_us();
  }
}

StreamSpan::~StreamSpan() {
  if (!active_) return;
  auto record = [b = begin_us_, lane = stream_.name(), name = name_] {
    Trace::global().add(lane, name, *b, Trace::global().now_us());
  };
  if (stream_.device().is_cpu()) {
    try {
      stream_.enqueue_marker(record);
    } catch (...) {
    }
  } else {
    record();
  }
}

}  // namespace fanout
