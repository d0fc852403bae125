// CUDA sum of squares: pass 1 gives each of a fixed number of blocks (a function
// of n only) a grid-stride share summed in double; pass 2, one block, sums the
// partials in a fixed order. No atomics, so the result is deterministic.

#include <math_constants.h>

#include <algorithm>
#include <cfloat>

#include "ops/cuda/common.cuh"
#include "ops/cuda/grad_norm.h"

namespace fanout::ops::cuda {

namespace {

constexpr int kMaxPartials = 1024;  // pass-1 blocks at most; pass 2 is one block of this many

__global__ void sum_squares_partial(double* partial, const float* buf, int64_t n) {
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    double x = buf[i];
    s += x * x;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// One block of kMaxPartials threads.
__global__ void sum_partials_to_float(float* out, const double* partial, int count) {
  double s = threadIdx.x < count ? partial[threadIdx.x] : 0.0;
  s = block_sum(s);
  if (threadIdx.x == 0)
    out[0] = s > static_cast<double>(FLT_MAX) ? CUDART_INF_F : static_cast<float>(s);
}

}  // namespace

// ---

void norm_squared_f32(void* stream, float* out, const float* buf, int64_t n) {
  BoundStream s(stream);
  const int blocks = static_cast<int>(std::min<int64_t>(grid_for(n), kMaxPartials));
  StreamScratch partial(sizeof(double) * blocks, s);
  if (n > 0) {
    sum_squares_partial<<<blocks, kBlock, 0, s>>>(partial.as<double>(), buf, n);
    FANOUT_CUDA_LAUNCH_CHECK();
  }
  sum_partials_to_float<<<1, kMaxPartials, 0, s>>>(out, partial.as<double>(), n > 0 ? blocks : 0);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
