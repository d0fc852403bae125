// Device parsing: good forms, bad forms (each error names the entry), availability.

#include <doctest/doctest.h>

#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/device.h"

using namespace fanout;

TEST_CASE("device_parse accepts cpu:N and cuda:N and bare kinds") {
  CHECK(device_parse("cpu:0") == cpu_device(0));
  CHECK(device_parse(" cuda:3 ") == cuda_device(3));
  CHECK(device_parse("cpu:12").index == 12);
  Device bare = device_parse("cuda");
  CHECK(bare.is_cuda());
  CHECK(bare.is_bare());
  CHECK(bare.str() == "cuda");
  CHECK(device_parse("cpu:7").str() == "cpu:7");
}

TEST_CASE("device_parse rejects malformed entries naming them") {
  for (std::string bad :
       {"cuda:x", "gpu:0", "cpu:-1", "", "cpu:", "cpu:1x", "CPU:0", "cpu:0:1", "cpu:99999"}) {
    CAPTURE(bad);
    try {
      device_parse(bad);
      FAIL("accepted ", bad);
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("'" + bad + "'") != std::string::npos);
    }
  }
}

TEST_CASE("devices_parse handles lists and duplicates and rejects empty entries") {
  auto d = devices_parse("cpu:2,cpu:0");
  REQUIRE(d.size() == 2);
  CHECK(d[0] == cpu_device(2));
  CHECK(d[1] == cpu_device(0));
  CHECK(devices_parse("cuda:0,cuda:0").size() == 2);
  CHECK(devices_str(devices_parse("cpu:0, cpu:1")) == "cpu:0,cpu:1");
  CHECK_THROWS_AS(devices_parse("cpu:0,,cpu:1"), Error);
  CHECK_THROWS_AS(devices_parse("cpu:0,"), Error);
  CHECK_THROWS_AS(devices_parse(""), Error);
  CHECK_THROWS_AS(devices_parse("cpu,cpu:1"), Error);  // a bare kind stands alone
  CHECK_THROWS_WITH_AS(devices_parse("cpu:0,gpu:1"), doctest::Contains("'gpu:1'"), Error);
}

TEST_CASE("devices_parse refuses a list that mixes cpu and cuda devices in one line") {
  for (std::string mixed :
       {"cuda:0,cpu:0", "cpu:0,cuda:0", "cpu:0,cpu:1,cuda:1", "cpu:3, cuda:3"}) {
    CAPTURE(mixed);
    const std::string want =
        "bad device list '" + mixed + "': all devices must be of one kind (cpu or cuda)";
    CHECK_THROWS_WITH_AS(devices_parse(mixed), want.c_str(), Error);
  }
  // One kind is fine, whether or not the devices exist (devices_check_available's job).
  CHECK(devices_parse("cuda:1,cuda:0").size() == 2);
}

TEST_CASE("auto means every GPU or else cpu:0") {
  auto d = devices_parse("auto");
  if (cuda_device_count() == 0) {
    REQUIRE(d.size() == 1);
    CHECK(d[0] == cpu_device(0));
  } else {
    CHECK(static_cast<int>(d.size()) == cuda_device_count());
    CHECK(d[0].is_cuda());
  }
}

TEST_CASE("devices_check_available names the missing cuda device") {
  CHECK_NOTHROW(devices_check_available(devices_parse("cpu:0,cpu:5")));
  int n = cuda_device_count();
  std::string missing = "cuda:" + std::to_string(n);
  CHECK_THROWS_WITH_AS(devices_check_available({cpu_device(0), cuda_device(n)}),
                       doctest::Contains((missing + " is not available").c_str()), Error);
}

TEST_CASE("device_resolve gives a bare kind the local rank") {
  CHECK(device_resolve(device_parse("cpu"), 2) == cpu_device(2));
  CHECK(device_resolve(cuda_device(1), 3) == cuda_device(1));
}
