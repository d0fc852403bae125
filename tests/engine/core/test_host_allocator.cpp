// host_allocator() and HostBuffer: host memory of no device, counted apart from
// every cpu:N device, 64-byte aligned, given back by the buffer that holds it,
// and refused in one line that names "the host".

#include <doctest/doctest.h>

#include <cstdint>
#include <utility>

#include "engine/core/allocator.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using fanout::test::error_of;
using fanout::test::has;

TEST_CASE("the host allocator is one, and no device counts its bytes") {
  Allocator& host = host_allocator();
  CHECK(&host == &host_allocator());
  CHECK(host.name() == "the host");
  CHECK(allocator_for(cpu_device(0)).name() == "cpu:0");
  Allocator& cpu0 = allocator_for(cpu_device(0));
  const AllocatorStats h0 = host.stats(), d0 = cpu0.stats();
  {
    HostBuffer b(1000, MemTag::optimizer);
    REQUIRE(b.data() != nullptr);
    CHECK(b.count() == 1000);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
    b.data()[999] = 1.0f;  // all of it is there
    CHECK(host.stats().tag(MemTag::optimizer).live == h0.tag(MemTag::optimizer).live + 4000);
    CHECK(host.stats().total.live == h0.total.live + 4000);
    CHECK(cpu0.stats().total.live == d0.total.live);
    CHECK(cpu0.stats().num_allocs == d0.num_allocs);
  }
  CHECK(host.stats().total.live == h0.total.live);
}

TEST_CASE("a host buffer moves its memory and frees it once") {
  Allocator& host = host_allocator();
  const size_t live0 = host.stats().tag(MemTag::params).live;
  auto live = [&] { return host.stats().tag(MemTag::params).live - live0; };
  HostBuffer a(10, MemTag::params);
  float* p = a.data();
  HostBuffer b(std::move(a));
  CHECK(b.data() == p);
  CHECK(b.count() == 10);
  CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  CHECK(a.count() == 0);
  CHECK(live() == 40);
  HostBuffer c(3, MemTag::params);
  c = std::move(b);  // c's 3 floats go back, b's 10 come over
  CHECK(c.data() == p);
  CHECK(live() == 40);
  c = HostBuffer();
  CHECK(live() == 0);
  HostBuffer empty(0, MemTag::params);  // no memory for none
  CHECK(empty.data() == nullptr);
  CHECK(live() == 0);
}

TEST_CASE("the host's out-of-memory errors name the host") {
  Allocator& host = host_allocator();
  const AllocatorStats before = host.stats();
  // More than any machine has.
  const std::string msg = error_of([] { HostBuffer b(int64_t{1} << 60, MemTag::optimizer); });
  CHECK(has(msg, "out of memory on the host: allocating "));
  CHECK(has(msg, " of optimizer with "));
  CHECK(has(msg, " live failed (the machine has no more free memory)"));
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(host.stats().total.live == before.total.live);  // a refusal counts nowhere
  CHECK(host.stats().num_allocs == before.num_allocs);

  struct CapacityReset {
    Allocator& a;
    ~CapacityReset() { a.set_capacity(0); }
  } reset{host};
  host.set_capacity(host.stats().total.live + 1024);
  const std::string over = error_of([] { HostBuffer b(1000, MemTag::grads); });
  CHECK(has(over, "out of memory on the host (capacity "));
  CHECK(has(over, " of grads with "));
}
