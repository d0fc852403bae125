#pragma once
// CPU reference residual add (see ops/residual.h), templated on the scalar so the
// tests can run it in double against finite differences. Instantiated for float,
// double. Pointers may alias (out == a is the usual in-place use).

#include <cstdint>

namespace fanout::ops::cpu {

template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n);

template <typename T>
void residual_backward(T* da, T* db, const T* dout, int64_t n);

}  // namespace fanout::ops::cpu
