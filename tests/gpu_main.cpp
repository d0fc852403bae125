// doctest's main for the GPU suite (ctest label `gpu`): exits 77, which ctest
// reports as skipped, on machines without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "engine/core/cuda_runtime.h"

int main(int argc, char** argv) {
  if (fanout::cuda_device_count() == 0) {
    std::printf("skipped: %s\n", fanout::cuda_unavailable_reason().c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
