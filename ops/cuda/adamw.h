#pragma once
// CUDA launcher behind ops/adamw.h (adamw.cu), queued on a cudaStream_t passed as
// void*. Same arguments, order of operations and fp32 roundings as
// ops/cpu/adamw.h.

#include <cstdint>

namespace fanout::ops::cuda {

// working (n bf16 bits), unless null: the updated params rounded once, same pass.
void adamw_update_f32(void* stream, float* params, const float* grads, float* m, float* v,
                      int64_t n, double lr, double beta1, double beta2, double eps,
                      double weight_decay, int64_t step, float grad_scale,
                      uint16_t* working = nullptr);

}  // namespace fanout::ops::cuda
