// CUDA embedding gather and scatter-add: grid-stride loops over the N*C output
// (or gradient) elements, so consecutive threads touch consecutive channels of
// a row. The scatter uses fp32 atomicAdd on the table gradient.

#include <math_constants.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/embedding.h"

namespace fanout::ops::cuda {

namespace {

__global__ void embedding_gather(float* out, const int32_t* ids, const float* table, int64_t N,
                                 int64_t C, int64_t V) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i - n * C;
    const int64_t id = ids[n];
    out[i] = id >= 0 && id < V ? table[id * C + c] : CUDART_NAN_F;
  }
}

// dtable holds rows [row0, row0 + rows) of the table's gradient.
__global__ void embedding_scatter_add(float* dtable, const float* dout, const int32_t* ids,
                                      int64_t N, int64_t C, int64_t row0, int64_t rows) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i - n * C;
    const int64_t id = ids[n];
    if (id >= row0 && id < row0 + rows) atomicAdd(dtable + (id - row0) * C + c, dout[i]);
  }
}

}  // namespace

// ---

void embedding_forward_f32(void* stream, float* out, const int32_t* ids, const float* table,
                           int64_t N, int64_t C, int64_t V) {
  if (N <= 0 || C <= 0) return;
  cudaStream_t s = stream_bind(stream);
  embedding_gather<<<grid_for(N * C), kBlock, 0, s>>>(out, ids, table, N, C, V);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void embedding_backward_f32(void* stream, float* dtable, const float* dout, const int32_t* ids,
                            int64_t N, int64_t C, int64_t V) {
  if (N <= 0 || C <= 0) return;
  cudaStream_t s = stream_bind(stream);
  embedding_scatter_add<<<grid_for(N * C), kBlock, 0, s>>>(dtable, dout, ids, N, C, 0, V);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void embedding_backward_rows_f32(void* stream, float* dtable_rows, const float* dout,
                                 const int32_t* ids, int64_t N, int64_t C, int64_t row0,
                                 int64_t rows) {
  if (N <= 0 || C <= 0 || rows <= 0) return;
  cudaStream_t s = stream_bind(stream);
  embedding_scatter_add<<<grid_for(N * C), kBlock, 0, s>>>(dtable_rows, dout, ids, N, C, row0,
                                                           rows);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
