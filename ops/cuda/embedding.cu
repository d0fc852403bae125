// CUDA embedding gather and scatter-add: grid-stride loops over the N*C output
// (or gradient) elements, so consecutive threads touch consecutive channels of
// a row. The gather reads an f32 or a bf16 table (or a shard of its rows),
// widened exactly, into f32 rows, 8 channels a step with 16-byte loads and
// stores when every row starts on a 16-byte boundary (C a multiple of 8, both
// buffers aligned). The scatter uses fp32 atomicAdd on the table gradient.

#include <math_constants.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/embedding.h"

namespace fanout::ops::cuda {

namespace {

// out[n, c] = table[ids[n] - row0, c] for the ids in [row0, row0 + rows) that the
// table holds, 0 for another id of [0, V) (another shard's row), NaN for an id
// outside [0, V). With vec, each thread moves 8 channels of one row.
template <typename Table>
__global__ void embedding_gather(float* out, const int32_t* ids, const Table* table, int64_t N,
                                 int64_t C, int64_t V, int64_t row0, int64_t rows, bool vec) {
  auto missing = [&](int64_t id) { return id >= 0 && id < V ? 0.0f : CUDART_NAN_F; };
  if (vec) {
    const int64_t groups = N * C / kVec, row_groups = C / kVec;
    for (int64_t g = grid_thread(); g < groups; g += grid_stride()) {
      const int64_t n = g / row_groups, c = (g - n * row_groups) * kVec;
      const int64_t id = ids[n];
      float x[kVec];
      if (id >= row0 && id < row0 + rows) {
        load8(table + (id - row0) * C + c, x);
      } else {
        const float m = missing(id);
#pragma unroll
        for (int k = 0; k < kVec; ++k) x[k] = m;
      }
      store8(out + n * C + c, x);
    }
    return;
  }
  for (int64_t i = grid_thread(); i < N * C; i += grid_stride()) {
    const int64_t n = i / C, c = i - n * C;
    const int64_t id = ids[n];
    out[i] = id >= row0 && id < row0 + rows ? load(table, (id - row0) * C + c) : missing(id);
  }
}

// dtable holds rows [row0, row0 + rows) of the table's gradient.
__global__ void embedding_scatter_add(float* dtable, const float* dout, const int32_t* ids,
                                      int64_t N, int64_t C, int64_t row0, int64_t rows) {
  for (int64_t i = grid_thread(); i < N * C; i += grid_stride()) {
    const int64_t n = i / C, c = i - n * C;
    const int64_t id = ids[n];
    if (id >= row0 && id < row0 + rows) atomicAdd(dtable + (id - row0) * C + c, dout[i]);
  }
}

}  // namespace

// ---

template <typename Table>
void embedding_forward_rows(void* stream, float* out, const int32_t* ids, const Table* table_rows,
                            int64_t N, int64_t C, int64_t V, int64_t row0, int64_t rows) {
  if (N <= 0 || C <= 0) return;
  const bool vec = C % kVec == 0 && is_aligned16(out) && is_aligned16(table_rows);
  BoundStream s(stream);
  embedding_gather<<<grid_for(vec ? N * C / kVec : N * C), kBlock, 0, s>>>(out, ids, table_rows, N,
                                                                           C, V, row0, rows, vec);
  FANOUT_CUDA_LAUNCH_CHECK();
}

template void embedding_forward_rows<float>(void*, float*, const int32_t*, const float*, int64_t,
                                            int64_t, int64_t, int64_t, int64_t);
template void embedding_forward_rows<uint16_t>(void*, float*, const int32_t*, const uint16_t*,
                                               int64_t, int64_t, int64_t, int64_t, int64_t);

void embedding_backward_f32(void* stream, float* dtable, const float* dout, const int32_t* ids,
                            int64_t N, int64_t C, int64_t V) {
  if (N <= 0 || C <= 0) return;
  BoundStream s(stream);
  embedding_scatter_add<<<grid_for(N * C), kBlock, 0, s>>>(dtable, dout, ids, N, C, 0, V);
  FANOUT_CUDA_LAUNCH_CHECK();
}

void embedding_backward_rows_f32(void* stream, float* dtable_rows, const float* dout,
                                 const int32_t* ids, int64_t N, int64_t C, int64_t row0,
                                 int64_t rows) {
  if (N <= 0 || C <= 0 || rows <= 0) return;
  BoundStream s(stream);
  embedding_scatter_add<<<grid_for(N * C), kBlock, 0, s>>>(dtable_rows, dout, ids, N, C, row0,
                                                           rows);
  FANOUT_CUDA_LAUNCH_CHECK();
}

}  // namespace fanout::ops::cuda
