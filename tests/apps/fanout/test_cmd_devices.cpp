// `fanout devices`, --version, --help and usage errors, through the real binary.

#include <doctest/doctest.h>

#include "engine/core/cuda_runtime.h"
#include "tests/apps/fanout/cli_runner.h"

using fanout::test::run_fanout;

TEST_CASE("fanout devices lists the CPU and says plainly when no CUDA device exists") {
  auto r = run_fanout({"devices"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("cpu:") != std::string::npos);
  if (fanout::cuda_device_count() == 0) {
    // The reason depends on the build: a CUDA build on a machine without a GPU
    // found no device; a -DFANOUT_CUDA=OFF build has no CUDA backend at all.
    const char* expected = fanout::cuda_compiled()
                               ? "cuda: no CUDA device was found"
                               : "cuda: this fanout binary was built without CUDA";
    CAPTURE(r.out);
    CHECK(r.out.find(expected) != std::string::npos);
    CHECK(r.err.empty());  // no error spam without a driver
  }
}

TEST_CASE("an unavailable cuda device is one line and a non-zero exit") {
  if (fanout::cuda_device_count() > 0) return;
  auto r = run_fanout({"devices", "--devices", "cuda:0"});
  CHECK(r.rc != 0);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find("cuda:0 is not available") != std::string::npos);
}

TEST_CASE("malformed device lists are rejected naming the entry") {
  for (std::string bad : {"cuda:x", "gpu:0", "cpu:-1", "cpu:0,,cpu:1", ""}) {
    CAPTURE(bad);
    auto r = run_fanout({"devices", "--devices", bad});
    CHECK(r.rc != 0);
    CHECK(r.err_lines() == 1);
  }
  auto r = run_fanout({"devices", "--devices", "cpu:0,cpu:1"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("cpu:0,cpu:1") != std::string::npos);
}

TEST_CASE("version and help print and an unknown flag is a usage error") {
  auto v = run_fanout({"--version"});
  CHECK(v.rc == 0);
  CHECK(v.out.find("fanout ") != std::string::npos);
  auto h = run_fanout({"--help"});
  CHECK(h.rc == 0);
  CHECK(h.out.find("devices") != std::string::npos);
  auto u = run_fanout({"devices", "--no-such-flag"});
  CHECK(u.rc == 2);
  CHECK(u.err_lines() == 1);
}
