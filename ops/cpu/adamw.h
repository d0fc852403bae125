#pragma once
// CPU reference AdamW step (see ops/adamw.h), templated on the scalar so the tests
// can run the same order of operations in double. Instantiated for float, double.
// Scalars derived from the hyper-parameters (1 - lr*wd, bias corrections) are
// computed in double and rounded to T, as torch does with its Python floats.

#include <cstdint>

namespace fanout::ops::cpu {

// working (n bf16 bits), unless null (T = float only): the updated params rounded
// once, each chunk while it is still in cache.
template <typename T>
void adamw_update(T* params, const T* grads, T* m, T* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t step, T grad_scale,
                  uint16_t* working = nullptr);

}  // namespace fanout::ops::cpu
