#pragma once
// CPU reference RMSNorm (see ops/rmsnorm.h), templated on the scalar so the tests
// can run it in double against finite differences. Instantiated for float, double.

#include <cstdint>

namespace fanout::ops::cpu {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, T eps);

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int64_t N, int64_t C);

}  // namespace fanout::ops::cpu
