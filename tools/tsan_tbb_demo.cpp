// Correctly synchronised programs that ThreadSanitizer reports anyway, because
// the synchronisation happens inside libraries it cannot see (Debian's
// libtbb.so.12, libtbbmalloc.so.2 and libstdc++.so.6 are not instrumented).
// Each mode repeats, in a few lines, a pattern fanout uses; `tools/sanitize.sh
// demo` builds this with -fsanitize=thread and counts the reports per mode.
// docs/sanitizers.md explains the results.
//
//   tsan_tbb_demo queue-tbbmalloc  worker.cpp's queue with oneTBB's allocator: reports
//   tsan_tbb_demo queue-malloc     the same queue with std::allocator (fanout's fix): none
//   tsan_tbb_demo parallel-for     caller writes, tbb::parallel_for, caller reads: reports
//   tsan_tbb_demo parallel-for-1   the same with oneTBB limited to one thread: none
//   tsan_tbb_demo task-group       task_group::run then wait: reports
//   tsan_tbb_demo exception-ptr    an error handed over as thread_pool.cpp did: reports
//   tsan_tbb_demo exception-moved  the same, moved instead of copied (fanout's fix): none

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <tbb/concurrent_queue.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_group.h>

namespace {

// A consumer thread runs closures popped from a queue, as fanout::Worker does.
// Every closure is pushed before it is popped; only the consumer touches `sum`.
template <typename Queue>
void queue_handoff() {
  Queue q;
  long sum = 0;
  std::thread consumer([&] {
    for (;;) {
      std::function<void()> fn;
      q.pop(fn);
      if (!fn) return;
      fn();
    }
  });
  for (int i = 0; i < 100000; ++i) {
    q.push([&sum, i] { sum += i; });
    if (i % 64 == 0) std::this_thread::yield();  // let the consumer free pages
  }
  q.push(std::function<void()>());
  consumer.join();
  std::printf("sum %ld\n", sum);
}

// The caller fills a buffer, tbb::parallel_for doubles it, the caller reads it:
// parallel_for returns only after every body ran (its wait orders them).
void parallel_for_handoff() {
  std::vector<double> v(1 << 16);
  double total = 0;
  for (int round = 0; round < 20; ++round) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(i + round);
    tbb::parallel_for(size_t{0}, v.size(), [&](size_t i) { v[i] *= 2; });
    for (double x : v) total += x;
  }
  std::printf("total %g\n", total);
}

void task_group_handoff() {
  int sum = 0;
  for (int round = 0; round < 2000; ++round) {
    int x = round, y = 0;
    tbb::task_group g;
    g.run([&] { y = x + 1; });
    g.wait();
    sum += y;
  }
  std::printf("sum %d\n", sum);
}

// A worker hands its error to a waiting thread under a mutex and then drops its
// own reference. The reference count lives in libstdc++.so (atomic, correct,
// not instrumented), so when the worker's drop is the last one, its delete of
// the exception looks unordered with the waiter's read of what().
void exception_handoff(bool move) {
  for (int round = 0; round < 20; ++round) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr first;
    std::thread worker([&] {
      std::exception_ptr err;
      try {
        throw std::runtime_error("device failed in round " + std::to_string(round));
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        first = move ? std::move(err) : err;
        done = true;
        cv.notify_all();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // waiter drops first
    });
    std::string msg;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
      try {
        std::rethrow_exception(first);
      } catch (const std::exception& e) {
        msg = e.what();
      }
      first = nullptr;
    }
    worker.join();
    if (msg.empty()) std::puts("lost the error");
  }
  std::puts("errors handed over");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "queue-tbbmalloc") {
    queue_handoff<tbb::concurrent_bounded_queue<std::function<void()>>>();
  } else if (mode == "queue-malloc") {
    queue_handoff<tbb::concurrent_bounded_queue<std::function<void()>,
                                                std::allocator<std::function<void()>>>>();
  } else if (mode == "parallel-for") {
    parallel_for_handoff();
  } else if (mode == "parallel-for-1") {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    parallel_for_handoff();
  } else if (mode == "task-group") {
    task_group_handoff();
  } else if (mode == "exception-ptr") {
    exception_handoff(false);
  } else if (mode == "exception-moved") {
    exception_handoff(true);
  } else {
    std::fprintf(stderr, "usage: tsan_tbb_demo MODE (see the comment at the top)\n");
    return 2;
  }
  return 0;
}
