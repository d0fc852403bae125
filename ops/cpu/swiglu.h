#pragma once
// CPU reference SwiGLU (see ops/swiglu.h), templated on the storage types: X for
// gate, up, out and the input gradients, G for dout; float, bf16 (ops/cpu/bf16.h),
// or double for the finite-difference tests. float and bf16 compute in float and
// round once at the store. Instantiated for (X, G) = (float, float), (float, bf16),
// (bf16, float), (bf16, bf16), (double, double) (forward: X = float, bf16, double).
// Gradients may alias their inputs (dgate == gate, dup == up): each element is
// read before it is written.

#include <cstdint>

namespace fanout::ops::cpu {

// sigmoid(x) without overflow: exp() only ever sees a non-positive argument.
template <typename T>
T sigmoid_stable(T x);

// Over rows: out (rows, cols) = silu(gate) * up, where element (r, c) of gate and
// up is at r * ld + c (the fused gate/up projection's rows: ld = 2 cols, up = gate
// + cols) and of out at r * cols + c.
template <typename X>
void swiglu_forward(X* out, const X* gate, const X* up, int64_t rows, int64_t cols, int64_t ld);

// dgate, dup at gate's layout (ld), dout at out's (cols).
template <typename X, typename G = X>
void swiglu_backward(X* dgate, X* dup, const G* dout, const X* gate, const X* up, int64_t rows,
                     int64_t cols, int64_t ld);

// Flat: n elements of each.
template <typename X>
void swiglu_forward(X* out, const X* gate, const X* up, int64_t n) {
  swiglu_forward(out, gate, up, 1, n, n);
}
template <typename X, typename G = X>
void swiglu_backward(X* dgate, X* dup, const G* dout, const X* gate, const X* up, int64_t n) {
  swiglu_backward(dgate, dup, dout, gate, up, 1, n, n);
}

}  // namespace fanout::ops::cpu
