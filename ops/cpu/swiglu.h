#pragma once
// CPU reference SwiGLU (see ops/swiglu.h), templated on the scalar so the tests
// can run it in double against finite differences. Instantiated for float, double.
// Gradients may alias their inputs (dgate == gate, dup == up): each element is
// read before it is written.

#include <cstdint>

namespace fanout::ops::cpu {

// sigmoid(x) without overflow: exp() only ever sees a non-positive argument.
template <typename T>
T sigmoid_stable(T x);

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

}  // namespace fanout::ops::cpu
