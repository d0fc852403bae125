#pragma once
// CPU matmul (see ops/matmul.h) through CBLAS: sgemm for float, dgemm for double,
// so the tests can run the same code path in double against finite differences.
// OpenBLAS is pinned to one thread on first use.

#include <cstdint>

namespace fanout::ops::cpu {

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, int64_t N, int64_t C, int64_t OC);

// dinp may be nullptr (skipped); both gradients accumulate.
template <typename T>
void matmul_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t C, int64_t OC);

}  // namespace fanout::ops::cpu
