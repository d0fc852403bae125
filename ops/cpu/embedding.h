#pragma once
// CPU reference embedding (see ops/embedding.h), templated on the scalar so the
// tests can run it in double against finite differences. Instantiated for float,
// double; the forward also reads a bf16 table (ops/cpu/bf16.h) into float rows,
// exactly. Both kernels throw fanout::Error for a token id outside [0, V).

#include <cstdint>

namespace fanout::ops::cpu {

template <typename T, typename Table = T>
void embedding_forward(T* out, const int32_t* ids, const Table* table, int64_t N, int64_t C,
                       int64_t V);

// Rows [row0, row0 + rows) of the table alone: ids outside them give zero rows.
template <typename T, typename Table = T>
void embedding_forward_rows(T* out, const int32_t* ids, const Table* table_rows, int64_t N,
                            int64_t C, int64_t V, int64_t row0, int64_t rows);

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t C,
                        int64_t V);
// Rows [row0, row0 + rows) of the table's gradient alone.
template <typename T>
void embedding_backward_rows(T* dtable_rows, const T* dout, const int32_t* ids, int64_t N,
                             int64_t C, int64_t V, int64_t row0, int64_t rows);

}  // namespace fanout::ops::cpu
