// ThreadPool: every device runs concurrently on its own long-lived thread; a
// throwing device is named on the caller while the others finish; no hang.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "engine/core/check.h"
#include "engine/core/thread_pool.h"

using namespace fanout;

TEST_CASE("run_on_devices runs every device concurrently with its device current") {
  ThreadPool pool(devices_parse("cpu:2,cpu:0,cpu:1"));
  // A barrier that only opens when all three run at once: proves concurrency.
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::vector<Device> seen(3);
  pool.run_on_devices([&](int i) {
    seen[i] = current_device();
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    bool ok = cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived == 3; });
    if (!ok) throw Error("devices did not run concurrently");
  });
  CHECK(seen[0] == cpu_device(2));
  CHECK(seen[1] == cpu_device(0));
  CHECK(seen[2] == cpu_device(1));
}

TEST_CASE("workers are long-lived: the same thread serves a device every call") {
  ThreadPool pool(devices_parse("cpu:0,cpu:1"));
  std::vector<std::thread::id> first(2), second(2);
  pool.run_on_devices([&](int i) { first[i] = std::this_thread::get_id(); });
  pool.run_on_devices([&](int i) { second[i] = std::this_thread::get_id(); });
  CHECK(first == second);
  CHECK(first[0] != first[1]);
}

TEST_CASE("a throwing device is named on the caller and the others finish and no hang") {
  ThreadPool pool(devices_parse("cpu:0,cpu:1,cpu:2,cpu:3"));
  std::atomic<int> finished{0};
  auto step = [&](int i) {
    if (i == 2) throw Error("injected failure");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ++finished;
  };
  CHECK_THROWS_WITH_AS(pool.run_on_devices(step), "cpu:2: injected failure", Error);
  CHECK(finished == 3);
  // The pool still works after a failure.
  finished = 0;
  pool.run_on_devices([&](int) { ++finished; });
  CHECK(finished == 4);
}

TEST_CASE("run_on runs only the listed entries") {
  ThreadPool pool(devices_parse("cpu:0,cpu:1,cpu:2"));
  std::vector<int> ran(3, 0);
  pool.run_on({0, 2}, [&](int i) { ran[i] = 1; });
  CHECK(ran == std::vector<int>{1, 0, 1});
}

TEST_CASE("non-fanout exceptions are wrapped with the device name") {
  ThreadPool pool(devices_parse("cpu:0,cpu:1"));
  CHECK_THROWS_WITH_AS(pool.run_on_devices([](int i) {
    if (i == 1) throw std::runtime_error("bad alloc somewhere");
  }),
                       "cpu:1: bad alloc somewhere", Error);
}
