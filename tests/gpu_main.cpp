// doctest's main for the GPU suite (ctest label `gpu`). Without a CUDA device it
// exits 77, which ctest reports as skipped, but only where skipped can mean "no
// GPU here": when a GPU is expected (a /dev/nvidia* node exists, or
// FANOUT_REQUIRE_GPU=1) no usable device is a failure naming the reason, so a
// GPU machine whose driver or libraries are broken does not pass as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "engine/core/cuda_runtime.h"

namespace {

// Why this machine should have a usable GPU, or "" when nothing says so.
std::string gpu_expected_because() {
  const char* require = std::getenv("FANOUT_REQUIRE_GPU");
  if (require != nullptr && std::strcmp(require, "1") == 0) return "FANOUT_REQUIRE_GPU=1";
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/dev", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename().string().rfind("nvidia", 0) == 0)
      return it->path().string() + " exists";
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (fanout::cuda_device_count() == 0) {
    const std::string reason = fanout::cuda_unavailable_reason();
    const std::string expected = gpu_expected_because();
    if (!expected.empty()) {
      std::fprintf(stderr, "fanout_gpu_tests: error: no usable CUDA device although %s: %s\n",
                   expected.c_str(), reason.c_str());
      return 1;
    }
    std::printf("skipped: %s\n", reason.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
