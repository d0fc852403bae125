#pragma once
// CUDA launchers behind ops/embedding.h (embedding.cu), queued on a cudaStream_t
// passed as void*.
//
// Token ids outside [0, V) cannot throw from a kernel: the trainer checks ids on
// the host before upload (token_data_check_vocab). Here forward fills such a row
// with NaN (so the loss shows it) and backward skips it.

#include <cstdint>

namespace fanout::ops::cuda {

// out (N, C) = table rows [row0, row0 + rows)[ids (N)] (the whole table: rows
// [0, V)); Table float (f32) or uint16_t (bf16 bits, widened exactly). An id in
// [0, V) outside the rows gives a row of zeros (another shard's row), one outside
// [0, V) a row of NaN as above.
template <typename Table>
void embedding_forward_rows(void* stream, float* out, const int32_t* ids, const Table* table_rows,
                            int64_t N, int64_t C, int64_t V, int64_t row0, int64_t rows);

// dtable (V, C) += scatter of dout (N, C) by ids (N), with atomicAdd: repeated ids
// accumulate, in an order that varies from run to run.
// Rows [row0, row0 + rows) of the table's gradient alone.
void embedding_backward_rows_f32(void* stream, float* dtable_rows, const float* dout,
                                 const int32_t* ids, int64_t N, int64_t C, int64_t row0,
                                 int64_t rows);
void embedding_backward_f32(void* stream, float* dtable, const float* dout, const int32_t* ids,
                            int64_t N, int64_t C, int64_t V);

}  // namespace fanout::ops::cuda
