// Allocator accounting: live and peak bytes, per tag, after allocations and frees.

#include <doctest/doctest.h>

#include <cstdint>

#include "engine/core/allocator.h"
#include "engine/core/tensor.h"

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
