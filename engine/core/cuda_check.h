#pragma once
// FANOUT_CUDA_CHECK(expr) and its cuBLAS variant for code compiled with CUDA:
// the failing statement, the current device and file:line go into the message.
// Include only from .cu files or from .cpp files guarded by FANOUT_HAS_CUDA.

#include <cuda_runtime_api.h>

#include "engine/core/check.h"

#define FANOUT_CUDA_CHECK(expr)                                                               \
  do {                                                                                        \
    cudaError_t fanout_err_ = (expr);                                                         \
    if (fanout_err_ != cudaSuccess) {                                                         \
      int fanout_dev_ = -1;                                                                   \
      cudaGetDevice(&fanout_dev_);                                                            \
      ::fanout::detail::throw_error(::fanout::detail::str_cat(                                \
          "CUDA error on cuda:", fanout_dev_, ": ", cudaGetErrorString(fanout_err_), " in `", \
          #expr, "` at ", __FILE__, ":", __LINE__));                                          \
    }                                                                                         \
  } while (0)

// After every kernel launch.
#define FANOUT_CUDA_LAUNCH_CHECK() FANOUT_CUDA_CHECK(cudaGetLastError())
