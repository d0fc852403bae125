// Stream graphs on CPU streams (Note [Stream graphs]): a recording runs nothing,
// a launch replays it in order with the arguments of the recording, and what a
// recording cannot hold (waits, events, memory allocated or freed by the
// recording thread) fails it with the reason, as a CUDA recording would fail.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "tests/engine/core/stream_graph_test_util.h"

using namespace fanout;
using fanout::test::end_failure;

TEST_CASE("a recording runs nothing, and each launch replays it in order") {
  Stream s(cpu_device(0), "cpu:0 compute");
  std::vector<int> seen;
  int counter = 0;
  s.begin_capture();
  CHECK(s.capturing());
  for (int i = 0; i < 5; ++i) s.enqueue([&seen, &counter, i] { seen.push_back(i + 10 * counter); });
  s.enqueue([&counter] { ++counter; });
  std::unique_ptr<StreamGraph> g = s.end_capture();
  CHECK_FALSE(s.capturing());
  REQUIRE(g != nullptr);
  CHECK(g->size() == 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(seen.empty());  // recorded, not run
  s.enqueue([&seen] { seen.push_back(-1); });
  g->launch(s);
  g->launch(s);
  s.synchronize();
  CHECK(seen == std::vector<int>{-1, 0, 1, 2, 3, 4, 10, 11, 12, 13, 14});
  CHECK(counter == 2);
}

TEST_CASE("a replay reads the buffers as they are when it runs") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Tensor x = tensor_from_vector(s, std::vector<float>{1, 2, 3}, {3}, DType::f32, cpu_device(0));
  Tensor y = tensor_from_vector(s, std::vector<float>{0, 0, 0}, {3}, DType::f32, cpu_device(0));
  s.synchronize();
  s.begin_capture();
  s.enqueue([x, y] {
    for (int i = 0; i < 3; ++i) y.data<float>()[i] += 2 * x.data<float>()[i];
  });
  auto g = s.end_capture();
  g->launch(s);
  s.enqueue([x] { x.data<float>()[1] = 100; });
  g->launch(s);
  CHECK(tensor_to_vector<float>(s, y) == std::vector<float>{4, 204, 12});
}

TEST_CASE("waiting for a recording stream, or an event on it, fails the recording") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Stream other(cpu_device(0), "cpu:0 comm");
  int runs = 0;
  SUBCASE("synchronize") {
    s.begin_capture();
    s.enqueue([&runs] { ++runs; });
    CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains("waiting for the stream"), Error);
  }
  SUBCASE("an event recorded on it") {
    s.begin_capture();
    Event e;
    CHECK_THROWS_WITH_AS(e.record(s), doctest::Contains("an event on the stream"), Error);
  }
  SUBCASE("a wait for another stream's event") {
    Event e;
    e.record(other);
    s.begin_capture();
    CHECK_THROWS_WITH_AS(e.wait(s), doctest::Contains("a wait for an event"), Error);
  }
  CHECK(end_failure(s).find("the graph was not recorded") != std::string::npos);
  CHECK_FALSE(s.capturing());
  // The stream works as before, and the recorded closures never ran.
  s.enqueue([&runs] { runs += 10; });
  s.synchronize();
  CHECK(runs == 10);
}

TEST_CASE("the recording thread cannot allocate or free memory of the stream's device") {
  const Device dev = cpu_device(43);  // a device no other test uses
  Allocator& a = allocator_for(dev);
  Stream s(dev, "cpu:43 compute");
  SUBCASE("an allocation is refused, naming the stream") {
    s.begin_capture();
    CHECK_THROWS_WITH_AS(Tensor::empty({16}, DType::f32, dev, MemTag::activations),
                         doctest::Contains("cpu:43 compute: a recorded graph cannot keep memory"),
                         Error);
    // Another device, and another thread on this one, are not the recording's.
    Tensor elsewhere = Tensor::empty({16}, DType::f32, cpu_device(44));
    std::thread t([&] { Tensor mine = Tensor::empty({16}, DType::f32, dev); });
    t.join();
    const std::string why = end_failure(s);
    CHECK(why.find("it allocates 64 B of activations on cpu:43") != std::string::npos);
  }
  SUBCASE("a free is held until the recording ends") {
    auto t = std::make_unique<Tensor>(Tensor::empty({1024}, DType::f32, dev, MemTag::activations));
    const size_t before = a.stats().total.live;
    s.begin_capture();
    t.reset();
    CHECK(a.stats().total.live == before);  // still held: recorded work might use it
    const std::string why = end_failure(s);
    CHECK(why.find("it frees 4.0 KiB of activations on cpu:43") != std::string::npos);
    CHECK(a.stats().total.live == before - 4096);
  }
  SUBCASE("an aborted recording frees what it held") {
    auto t = std::make_unique<Tensor>(Tensor::empty({256}, DType::f32, dev));
    const size_t before = a.stats().total.live;
    s.begin_capture();
    t.reset();
    s.abort_capture();
    CHECK_FALSE(s.capturing());
    CHECK(a.stats().total.live == before - 1024);
  }
  // The thread records nothing any more: allocations work again.
  Tensor after = Tensor::empty({16}, DType::f32, dev);
  CHECK(after.numel() == 16);
}

TEST_CASE("a recording that fails in a replay reports it at synchronize") {
  Stream s(cpu_device(0), "cpu:0 compute");
  std::atomic<int> after{0}, markers{0};
  s.begin_capture();
  s.enqueue([] { throw Error("kernel failed"); });
  s.enqueue([&after] { ++after; });
  s.enqueue_marker([&markers] { ++markers; });
  auto g = s.end_capture();
  g->launch(s);
  CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains("kernel failed"), Error);
  CHECK(after == 0);    // skipped, as on a stream
  CHECK(markers == 1);  // markers still run: no waiter hangs
  s.synchronize();      // the error was reported once
}

TEST_CASE("a graph may be destroyed while its launch is queued") {
  Stream s(cpu_device(0), "cpu:0 compute");
  std::atomic<bool> go{false};
  std::atomic<int> ran{0};
  s.enqueue([&go] {
    while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  {
    s.begin_capture();
    s.enqueue([&ran] { ++ran; });
    auto g = s.end_capture();
    g->launch(s);
  }
  go = true;
  s.synchronize();
  CHECK(ran == 1);
}

TEST_CASE("graphs refuse misuse") {
  Stream s(cpu_device(0), "cpu:0 compute");
  Stream t(cpu_device(1), "cpu:1 compute");
  s.begin_capture();
  CHECK_THROWS_AS(s.begin_capture(), InternalError);  // one recording at a time
  s.enqueue([] {});
  auto g = s.end_capture();
  CHECK_THROWS_AS(g->launch(t), InternalError);  // another device's stream
  s.begin_capture();
  CHECK_THROWS_WITH_AS(g->launch(s), doctest::Contains("a graph launched into it"), Error);
  s.abort_capture();
  s.abort_capture();  // nothing to abort: no-op
  CHECK_THROWS_AS(s.end_capture(), InternalError);
  g->launch(s);
  s.synchronize();
}

TEST_CASE("a stream destroyed while recording drops the recording") {
  const Device dev = cpu_device(45);
  auto t = std::make_unique<Tensor>(Tensor::empty({64}, DType::f32, dev));
  const size_t before = allocator_for(dev).stats().total.live;
  {
    Stream s(dev, "cpu:45 compute");
    s.begin_capture();
    t.reset();
  }
  CHECK(allocator_for(dev).stats().total.live == before - 256);
  Tensor again = Tensor::empty({64}, DType::f32, dev);  // this thread records nothing
}

TEST_CASE("a recording ends on the thread that began it") {
  Stream s(cpu_device(0), "cpu:0 compute");
  s.begin_capture();
  std::thread t([&] { CHECK_THROWS_AS(s.end_capture(), InternalError); });
  t.join();
  CHECK(s.capturing());
  s.abort_capture();
  CHECK_FALSE(s.capturing());
}
