// DeferredFrees (the CUDA allocator's frees, Note [CUDA allocation ordering]) with
// fake fences: a block goes back to its pool only once every marker of its fence
// has passed; reclaim() never waits and keeps fence order; drain() waits for all;
// markers are recycled exactly once; a failed fence leaks the block instead of
// releasing it early; concurrent frees and reclaims lose nothing.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/core/deferred_frees.h"

using namespace fanout;

namespace {

// Two "streams"; a fence is one marker per stream, numbered in order. A marker
// passes once its stream's progress has reached it.
struct FakeDevice {
  std::mutex mu;
  int issued[2] = {0, 0};
  int progress[2] = {0, 0};
  std::vector<intptr_t> released;
  int recycled = 0, waited = 0;
  bool fail_fence = false;

  // A marker encodes (stream, sequence number) in a pointer-sized integer.
  static void* marker(int stream, int seq) {
    return reinterpret_cast<void*>(intptr_t(seq) * 2 + stream);
  }
  static int stream_of(void* m) { return int(reinterpret_cast<intptr_t>(m) % 2); }
  static int seq_of(void* m) { return int(reinterpret_cast<intptr_t>(m) / 2); }

  DeferredFrees::Hooks hooks() {
    return {[this] {
              std::lock_guard<std::mutex> lock(mu);
              if (fail_fence) throw std::runtime_error("device lost");
              return std::vector<void*>{marker(0, ++issued[0]), marker(1, ++issued[1])};
            },
            [this](void* m) {
              std::lock_guard<std::mutex> lock(mu);
              return progress[stream_of(m)] >= seq_of(m);
            },
            [this](void* m) {
              std::lock_guard<std::mutex> lock(mu);
              ++waited;
              progress[stream_of(m)] = std::max(progress[stream_of(m)], seq_of(m));
            },
            [this](void*) {
              std::lock_guard<std::mutex> lock(mu);
              ++recycled;
            },
            [this](void* block) {
              std::lock_guard<std::mutex> lock(mu);
              released.push_back(reinterpret_cast<intptr_t>(block));
            }};
  }
  void run(int stream, int upto) {
    std::lock_guard<std::mutex> lock(mu);
    progress[stream] = upto;
  }
};

void* block(intptr_t id) {
  return reinterpret_cast<void*>(id);
}

}  // namespace

TEST_CASE("a freed block goes back only once every stream has passed its fence") {
  FakeDevice dev;
  DeferredFrees frees(dev.hooks());
  frees.defer(block(100), 1000);
  frees.defer(block(200), 24);
  CHECK(frees.held_blocks() == 2);
  CHECK(frees.held_bytes() == 1024);
  CHECK(frees.reclaim() == 0);  // nothing has run
  dev.run(0, 2);                // stream 0 passed both fences, stream 1 none
  CHECK(frees.reclaim() == 0);
  CHECK(dev.released.empty());
  dev.run(1, 1);  // the first fence has passed on both
  CHECK(frees.reclaim() == 1000);
  CHECK(dev.released == std::vector<intptr_t>{100});
  CHECK(frees.held_bytes() == 24);
  dev.run(1, 2);
  CHECK(frees.reclaim() == 24);
  CHECK(dev.released == std::vector<intptr_t>{100, 200});
  CHECK(dev.recycled == 4);  // every marker given back once
  CHECK(dev.waited == 0);    // reclaim never waits
  CHECK(frees.held_blocks() == 0);
}

TEST_CASE("reclaim keeps fence order and drain waits for every fence") {
  FakeDevice dev;
  DeferredFrees frees(dev.hooks());
  for (intptr_t id = 1; id <= 5; ++id) frees.defer(block(id), 10);
  dev.run(0, 5);
  dev.run(1, 3);
  CHECK(frees.reclaim() == 30);
  CHECK(dev.released == std::vector<intptr_t>{1, 2, 3});
  CHECK(frees.drain() == 20);
  CHECK(dev.released == std::vector<intptr_t>{1, 2, 3, 4, 5});
  CHECK(dev.waited > 0);
  CHECK(dev.recycled == 10);
  CHECK(frees.drain() == 0);
}

TEST_CASE("a free without a fence is never released") {
  FakeDevice dev;
  DeferredFrees frees(dev.hooks());
  dev.fail_fence = true;
  frees.defer(block(7), 64);  // noexcept: the failure is swallowed
  CHECK(frees.held_blocks() == 0);
  CHECK(frees.drain() == 0);
  CHECK(dev.released.empty());
  frees.defer(nullptr, 0);  // a null block is nothing to hold
  CHECK(frees.held_blocks() == 0);
}

TEST_CASE("concurrent frees and reclaims release every block exactly once") {
  FakeDevice dev;
  DeferredFrees frees(dev.hooks());
  constexpr int kThreads = 4, kPerThread = 500;
  std::atomic<bool> stop{false};
  std::thread runner([&] {  // the "device" makes progress meanwhile
    while (!stop.load()) {
      std::lock_guard<std::mutex> lock(dev.mu);
      dev.progress[0] = dev.issued[0];
      dev.progress[1] = std::max(0, dev.issued[1] - 3);
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        frees.defer(block(1 + t * kPerThread + i), 8);
        if (i % 7 == 0) frees.reclaim();
      }
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  runner.join();
  frees.drain();
  std::vector<intptr_t> got = dev.released;
  std::sort(got.begin(), got.end());
  REQUIRE(got.size() == size_t(kThreads * kPerThread));
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == intptr_t(i + 1));
  CHECK(dev.recycled == 2 * kThreads * kPerThread);
  CHECK(frees.held_bytes() == 0);
}
