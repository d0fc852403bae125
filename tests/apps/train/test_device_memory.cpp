// --device-memory: the sizes parse_byte_size accepts (binary and decimal units, a
// fraction) and refuses (empty, negative, zero, malformed, past 1 PiB), each in one
// line naming the flag and the text; apply_device_memory sets each device's cap.

#include <doctest/doctest.h>

#include <string>

#include "apps/train/device_memory.h"
#include "engine/core/allocator.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using fanout::test::error_of;
using fanout::test::has;

TEST_CASE("parse_byte_size reads binary and decimal units, fractions and plain bytes") {
  const std::string f = "--device-memory";
  CHECK(train::parse_byte_size("512MiB", f) == 512ull << 20);
  CHECK(train::parse_byte_size("1.5GiB", f) == 3ull << 29);
  CHECK(train::parse_byte_size("2GB", f) == 2'000'000'000ull);
  CHECK(train::parse_byte_size("800M", f) == 800ull << 20);  // a bare letter is binary
  CHECK(train::parse_byte_size("1048576", f) == 1048576);
  CHECK(train::parse_byte_size("64KiB", f) == 65536);
  CHECK(train::parse_byte_size("64kB", f) == 64000);  // units are case-insensitive
  CHECK(train::parse_byte_size("3 gib", f) == 3ull << 30);
  CHECK(train::parse_byte_size("7B", f) == 7);
  CHECK(train::parse_byte_size("1", f) == 1);
  CHECK(train::parse_byte_size("0.1KB", f) == 100);  // exact decimals, no rounding drift
  CHECK(train::parse_byte_size("1.0009765625KiB", f) == 1025);
  CHECK(train::parse_byte_size("2TiB", f) == 2ull << 40);
  CHECK(train::parse_byte_size("1PiB", f) == train::kMaxByteSize);
  CHECK(train::parse_byte_size("1125899906842624", f) == train::kMaxByteSize);
}

TEST_CASE("parse_byte_size refuses empty, negative, zero, malformed and too large sizes") {
  const std::string f = "--device-memory";
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"", "--device-memory: an empty value is not a size (e.g. 512MiB or 1.5GiB)"},
      {"-1GiB", "--device-memory: '-1GiB' is negative: give a positive size, e.g. 512MiB"},
      {"-0", "--device-memory: '-0' is negative"},
      {"0",
       "--device-memory: '0' is zero: give a positive size, e.g. 512MiB (leave "
       "--device-memory out for no cap)"},
      {"0.0MiB", "--device-memory: '0.0MiB' is zero"},
      {"0.1B", "--device-memory: '0.1B' is less than one byte"},
      {"abc", "--device-memory: 'abc' is not a size: give a number and an optional unit"},
      {"12XB", "'12XB' is not a size"},
      {"1e9", "'1e9' is not a size"},
      {"MiB", "'MiB' is not a size"},
      {".", "'.' is not a size"},
      {"1.2.3", "'1.2.3' is not a size"},
      {"inf", "'inf' is not a size"},
      {" 5MiB", "' 5MiB' is not a size"},
      {"5MiB ", "'5MiB ' is not a size"},
      {"5 MiBs", "'5 MiBs' is not a size"},
      {"+5", "'+5' is not a size"},
      {"2PiB",
       "--device-memory: '2PiB' is more than 1 PiB, the largest size --device-memory takes"},
      {"1025TiB", "'1025TiB' is more than 1 PiB"},
      {"1.0000001PiB", "'1.0000001PiB' is more than 1 PiB"},
      {"1125899906842625", "is more than 1 PiB"},
      {"99999999999999999999999999GB", "is more than 1 PiB"},  // no 64-bit overflow
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    const std::string msg = error_of([&] { train::parse_byte_size(c.text, f); });
    CHECK(has(msg, c.message));
    CHECK(msg.find('\n') == std::string::npos);
  }
  // The validator form has no flag prefix (CLI11 adds it).
  CHECK(train::byte_size_problem("0", f).rfind("'0' is zero", 0) == 0);
  size_t bytes = 0;
  CHECK(train::byte_size_problem("4KiB", f, &bytes).empty());
  CHECK(bytes == 4096);
}

TEST_CASE("apply_device_memory caps every listed device and 0 lifts the cap") {
  const std::vector<Device> devices = {cpu_device(48), cpu_device(49)};
  struct Lift {  // allocators are process-wide: the caps go whatever happens
    std::vector<Device> devices;
    ~Lift() { train::apply_device_memory(0, devices); }
  } lift{devices};
  train::apply_device_memory(size_t{3} << 20, devices);
  CHECK(allocator_for(cpu_device(48)).capacity() == size_t{3} << 20);
  CHECK(allocator_for(cpu_device(49)).capacity() == size_t{3} << 20);
  CHECK(has(error_of([] { allocator_for(cpu_device(49)).allocate(4 << 20, MemTag::params); }),
            "out of memory on cpu:49 (--device-memory 3.0 MiB): allocating 4.0 MiB of params"));
  train::apply_device_memory(0, devices);
  CHECK(allocator_for(cpu_device(48)).capacity() == 0);
  CHECK(allocator_for(cpu_device(49)).capacity() == 0);
}
