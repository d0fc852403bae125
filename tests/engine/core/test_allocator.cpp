// Allocator accounting: live and peak bytes, per tag, after allocations and frees;
// the capacity (--device-memory): refusals name the device, the tag and the bytes,
// count nothing, and hold under concurrent allocation.

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/tensor.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;

TEST_CASE("live and peak bytes follow allocations and frees") {
  Allocator& a = allocator_for(cpu_device(40));  // a device no other test uses
  a.reset_peak();
  AllocatorStats s0 = a.stats();
  void* p = a.allocate(1000, MemTag::params);
  void* q = a.allocate(500, MemTag::grads);
  AllocatorStats s1 = a.stats();
  CHECK(s1.total.live == s0.total.live + 1500);
  CHECK(s1.total.peak == s0.total.live + 1500);
  CHECK(s1.tag(MemTag::params).live == s0.tag(MemTag::params).live + 1000);
  CHECK(s1.tag(MemTag::grads).live == s0.tag(MemTag::grads).live + 500);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  a.deallocate(p, 1000, MemTag::params);
  AllocatorStats s2 = a.stats();
  CHECK(s2.total.live == s0.total.live + 500);
  CHECK(s2.total.peak == s0.total.live + 1500);  // the peak remembers
  CHECK(s2.tag(MemTag::params).peak == s0.tag(MemTag::params).live + 1000);
  a.deallocate(q, 500, MemTag::grads);
  CHECK(a.stats().total.live == s0.total.live);
  a.reset_peak();
  CHECK(a.stats().total.peak == s0.total.live);
}

TEST_CASE("each device has its own allocator") {
  Allocator& a = allocator_for(cpu_device(41));
  Allocator& b = allocator_for(cpu_device(42));
  CHECK(&a != &b);
  CHECK(&a == &allocator_for(cpu_device(41)));
  size_t b_before = b.stats().total.live;
  {
    Tensor t = Tensor::empty({256}, DType::f32, cpu_device(41), MemTag::activations);
    CHECK(a.stats().tag(MemTag::activations).live >= 1024);
    CHECK(b.stats().total.live == b_before);
  }
  CHECK(a.stats().tag(MemTag::activations).live == 0);  // the tensor's storage was freed
}

TEST_CASE("bytes_str is readable") {
  CHECK(bytes_str(512) == "512 B");
  CHECK(bytes_str(1536) == "1.5 KiB");
  CHECK(bytes_str(3u << 20) == "3.0 MiB");
}

// --- capacity ---------------------------------------------------------------

namespace {

// Allocators are process-wide: every capacity a test sets is lifted when it ends.
struct CapacityReset {
  Allocator& a;
  ~CapacityReset() { a.set_capacity(0); }
};

// Everything a refused allocation must leave as it was.
bool same_counts(const AllocatorStats& x, const AllocatorStats& y) {
  if (x.total.live != y.total.live || x.total.peak != y.total.peak) return false;
  if (x.num_allocs != y.num_allocs) return false;
  for (int i = 0; i < kNumMemTags; ++i) {
    if (x.by_tag[i].live != y.by_tag[i].live || x.by_tag[i].peak != y.by_tag[i].peak) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a capacity refuses an allocation past it in one line and counts nothing") {
  Allocator& a = allocator_for(cpu_device(43));
  CapacityReset reset{a};
  CHECK(a.capacity() == 0);  // the default: unlimited
  a.set_capacity(1000);
  CHECK(a.capacity() == 1000);
  void* p = a.allocate(600, MemTag::params);
  const AllocatorStats before = a.stats();
  const std::string msg = test::error_of([&] { a.allocate(500, MemTag::activations); });
  CHECK(msg ==
        "out of memory on cpu:43 (--device-memory 1000 B): allocating 500 B of activations "
        "with 600 B live needs 1.1 KiB");
  CHECK(same_counts(a.stats(), before));
  // One asked for more than the whole capacity says so the same way.
  CHECK(test::error_of([&] { a.allocate(5000, MemTag::grads); }) ==
        "out of memory on cpu:43 (--device-memory 1000 B): allocating 4.9 KiB of grads with "
        "600 B live needs 5.5 KiB");
  CHECK(same_counts(a.stats(), before));
  a.deallocate(p, 600, MemTag::params);
}

TEST_CASE("an allocation that exactly fills the capacity passes, freeing makes room again") {
  Allocator& a = allocator_for(cpu_device(44));
  CapacityReset reset{a};
  const size_t cap = size_t{1} << 20;
  a.set_capacity(cap);
  void* p = a.allocate(cap - 4096, MemTag::optimizer);
  void* q = a.allocate(4096, MemTag::comm);  // live == capacity
  CHECK(a.stats().total.live == cap);
  CHECK(a.stats().total.peak == cap);
  // Sizes that round to the capacity's text are given in bytes.
  const std::string msg = test::error_of([&] { a.allocate(64, MemTag::data); });
  CHECK(msg ==
        "out of memory on cpu:44 (--device-memory 1048576 B): allocating 64 B of data with "
        "1048576 B live needs 1048640 B");
  CHECK(msg.find('\n') == std::string::npos);
  a.deallocate(q, 4096, MemTag::comm);
  void* r = a.allocate(4096, MemTag::data);  // the freed bytes are available again
  CHECK(a.stats().tag(MemTag::data).live == 4096);
  CHECK(a.stats().total.live == cap);
  a.deallocate(r, 4096, MemTag::data);
  a.deallocate(p, cap - 4096, MemTag::optimizer);
  CHECK(a.stats().total.live == 0);
}

TEST_CASE("capacity 0 is unlimited, and a capacity below the live bytes refuses until freed") {
  Allocator& a = allocator_for(cpu_device(45));
  CapacityReset reset{a};
  void* p = a.allocate(8 << 20, MemTag::params);
  a.set_capacity(4 << 20);  // below what is live: allowed, every allocation refused
  CHECK(test::has(test::error_of([&] { a.allocate(1, MemTag::other); }),
                  "out of memory on cpu:45 (--device-memory 4.0 MiB): allocating 1 B of other "
                  "with 8.0 MiB live needs 8.0 MiB"));
  a.set_capacity(0);
  void* q = a.allocate(64 << 20, MemTag::activations);
  CHECK(a.stats().total.live == (72u << 20));
  a.deallocate(q, 64 << 20, MemTag::activations);
  a.deallocate(p, 8 << 20, MemTag::params);
}

TEST_CASE("concurrent allocations on one device never take it past its capacity") {
  Allocator& a = allocator_for(cpu_device(46));
  CapacityReset reset{a};
  const size_t cap = 32 << 10;
  a.set_capacity(cap);
  a.reset_peak();
  const size_t allocs_before = a.stats().num_allocs;
  constexpr int kThreads = 4, kRounds = 20000, kHeld = 16;
  // Workers record; only the test thread asserts.
  std::atomic<size_t> granted{0}, refused{0}, max_seen{0};
  std::atomic<int> wrong_message{0}, ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together, to contend
      std::vector<std::pair<void*, size_t>> held;
      const MemTag tag = t % 2 ? MemTag::activations : MemTag::params;
      for (int i = 0; i < kRounds; ++i) {
        if (held.size() == kHeld || (!held.empty() && rng() % 3 == 0)) {
          const size_t k = rng() % held.size();
          a.deallocate(held[k].first, held[k].second, tag);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
          continue;
        }
        const size_t bytes = 1 + rng() % (8 << 10);
        try {
          held.emplace_back(a.allocate(bytes, tag), bytes);
          granted.fetch_add(1);
        } catch (const Error& e) {
          refused.fetch_add(1);
          // (in bytes when the sum rounds to the capacity's own text)
          const std::string msg = e.what();
          if (msg.rfind("out of memory on cpu:46 (--device-memory ", 0) != 0 ||
              !test::has(msg, " live needs "))
            wrong_message.fetch_add(1);
        }
        const size_t live = a.stats().total.live;
        size_t prev = max_seen.load();
        while (live > prev && !max_seen.compare_exchange_weak(prev, live)) {
        }
      }
      for (auto [p, bytes] : held) a.deallocate(p, bytes, tag);
    });
  }
  for (std::thread& t : threads) t.join();
  const AllocatorStats s = a.stats();
  CHECK(max_seen.load() <= cap);
  CHECK(s.total.peak <= cap);  // the peak is the most ever reserved at once
  CHECK(refused.load() > 0);   // one thread alone holds up to 16 x 8 KiB
  CHECK(granted.load() > 0);
  CHECK(wrong_message.load() == 0);
  CHECK(s.num_allocs - allocs_before == granted.load());  // refusals are not counted
  CHECK(s.total.live == 0);
  CHECK(s.tag(MemTag::params).live == 0);
  CHECK(s.tag(MemTag::activations).live == 0);
}

TEST_CASE("memory that runs out gives one line with the device and the tag, counting nothing") {
  Allocator& a = allocator_for(cpu_device(47));
  const AllocatorStats before = a.stats();
  // More than any address space: refused before the system is asked.
  CHECK(test::error_of([&] { a.allocate(SIZE_MAX - 1, MemTag::grads); }) ==
        "out of memory on cpu:47: allocating 16777216.0 TiB of grads with 0 B live failed (the "
        "machine has no more free memory)");
  CHECK(same_counts(a.stats(), before));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // 4 PiB: past the 128 TiB a process can map, so aligned_alloc returns null
  // (sanitizers would abort on the size instead).
  CHECK(test::error_of([&] { a.allocate(size_t{1} << 52, MemTag::activations); }) ==
        "out of memory on cpu:47: allocating 4096.0 TiB of activations with 0 B live failed "
        "(the machine has no more free memory)");
  CHECK(same_counts(a.stats(), before));
#endif
}
