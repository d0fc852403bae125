#pragma once
// Token embedding: a row gather from the (V, C) table on the way in, a scatter-add
// back into the table's gradient on the way out. Shapes: N tokens (B*T) of C
// channels, a vocabulary of V rows. Token ids are i32; an id outside [0, V) is the
// caller's data error and surfaces as fanout::Error at the stream's synchronize().

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// out (N, C) = table (V, C)[ids (N)]. out f32; table f32 or bf16 (read exactly).
void embedding_forward(Stream& stream, const Tensor& out, const Tensor& ids, const Tensor& table,
                       int64_t N, int64_t C, int64_t V);

// Rows [row0, row0 + rows) of the table alone (a vocabulary-parallel shard):
// out (N, C) = table_rows (rows, C)[ids[n] - row0] where row0 <= ids[n] < row0 + rows,
// else a row of zeros, so the shards' outputs sum to embedding_forward's. out f32;
// table_rows f32 or bf16 (read exactly). Every id is still checked against [0, V).
void embedding_forward_rows(Stream& stream, const Tensor& out, const Tensor& ids,
                            const Tensor& table_rows, int64_t N, int64_t C, int64_t V, int64_t row0,
                            int64_t rows);

// dtable (V, C) += scatter of dout (N, C) by ids (N); repeated ids accumulate.
// Both f32.
void embedding_backward(Stream& stream, const Tensor& dtable, const Tensor& dout, const Tensor& ids,
                        int64_t N, int64_t C, int64_t V);

// Rows [row0, row0 + rows) of dtable alone: dtable_rows (rows, C) += the scatter
// of the tokens whose ids fall there (zero2/zero3 produce the embedding's
// gradient in parts).
void embedding_backward_rows(Stream& stream, const Tensor& dtable_rows, const Tensor& dout,
                             const Tensor& ids, int64_t N, int64_t C, int64_t V, int64_t row0,
                             int64_t rows);

}  // namespace fanout::ops
