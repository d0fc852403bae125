// Streams run work in order; events order work across streams and devices; a
// failing closure surfaces at synchronize() and does not wedge waiters.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "engine/core/check.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"

using namespace fanout;

TEST_CASE("a stream runs its closures in order") {
  Stream s(cpu_device(0), "cpu:0 compute");
  std::vector<int> seen;
  for (int i = 0; i < 200; ++i) {
    s.enqueue([&seen, i] {
      if (i % 17 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      seen.push_back(i);
    });
  }
  s.synchronize();
  REQUIRE(seen.size() == 200);
  for (int i = 0; i < 200; ++i) CHECK(seen[i] == i);
}

TEST_CASE("an event makes another stream wait for the recorded point") {
  Stream producer(cpu_device(0), "cpu:0 compute");
  Stream consumer(cpu_device(1), "cpu:1 comm");
  std::atomic<int> value{0};
  int observed = -1;
  producer.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    value = 42;
  });
  Event e;
  e.record(producer);
  e.wait(consumer);
  consumer.enqueue([&] { observed = value.load(); });
  consumer.synchronize();
  CHECK(observed == 42);
  CHECK(e.query());
}

TEST_CASE("an event waits for its latest record and not later work") {
  Stream a(cpu_device(0), "a");
  Stream b(cpu_device(0), "b");
  std::atomic<bool> release{false};
  std::atomic<int> stage{0};
  a.enqueue([&] { stage = 1; });
  Event e;
  e.record(a);
  a.enqueue([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    stage = 2;
  });
  int seen = -1;
  e.wait(b);
  b.enqueue([&] { seen = stage.load(); });
  b.synchronize();  // must not need a's second closure
  CHECK(seen == 1);
  release = true;
  a.synchronize();
  CHECK(stage == 2);
}

TEST_CASE("waiting on a never-recorded event does not block") {
  Stream s(cpu_device(0), "s");
  Event e;
  e.wait(s);
  int x = 0;
  s.enqueue([&] { x = 1; });
  s.synchronize();
  CHECK(x == 1);
  e.synchronize();
}

TEST_CASE(
    "a throwing closure surfaces at synchronize and skips later work and keeps events alive") {
  Stream s(cpu_device(3), "cpu:3 compute");
  Stream other(cpu_device(0), "cpu:0 comm");
  int after = 0;
  s.enqueue([] { throw Error("boom"); });
  s.enqueue([&] { after = 1; });  // skipped: the stream failed
  Event e;
  e.record(s);
  e.wait(other);  // must still complete
  other.synchronize();
  CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains("cpu:3 compute: boom"), Error);
  CHECK(after == 0);
  // The error was reported once; the stream is usable again.
  s.enqueue([&] { after = 2; });
  s.synchronize();
  CHECK(after == 2);
}

TEST_CASE("cross-device copies ordered by events see the producer's data") {
  Stream s0(cpu_device(0), "cpu:0 compute");
  Stream s1(cpu_device(1), "cpu:1 compute");
  Tensor a = Tensor::empty({1000}, DType::f32, cpu_device(0));
  Tensor b = Tensor::empty({1000}, DType::f32, cpu_device(1));
  s0.enqueue([a] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int i = 0; i < 1000; ++i) a.data<float>()[i] = static_cast<float>(i);
  });
  Event ready;
  ready.record(s0);
  ready.wait(s1);
  tensor_copy(s1, b, a);
  auto v = tensor_to_vector<float>(s1, b);
  CHECK(v[0] == 0.f);
  CHECK(v[999] == 999.f);
}
