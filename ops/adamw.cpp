#include "ops/adamw.h"

#include <cmath>

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/adamw.h"
#include "ops/cuda/adamw.h"

namespace fanout::ops {

void adamw_update(Stream& stream, const Tensor& params, const Tensor& grads, const Tensor& m,
                  const Tensor& v, int64_t n, const AdamWConfig& config, int64_t step,
                  float grad_scale, const Tensor& working) {
  const char* op = "adamw_update";
  OpScope scope(stream, OpClass::optimizer, op);
  // The same checks as torch.optim.AdamW's constructor, plus the step count.
  FANOUT_CHECK(config.lr >= 0, op, ": invalid learning rate ", config.lr);
  FANOUT_CHECK(config.eps >= 0, op, ": invalid epsilon ", config.eps);
  FANOUT_CHECK(config.beta1 >= 0 && config.beta1 < 1, op, ": invalid beta1 ", config.beta1,
               " (needs 0 <= beta1 < 1)");
  FANOUT_CHECK(config.beta2 >= 0 && config.beta2 < 1, op, ": invalid beta2 ", config.beta2,
               " (needs 0 <= beta2 < 1)");
  FANOUT_CHECK(config.weight_decay >= 0, op, ": invalid weight decay ", config.weight_decay);
  FANOUT_CHECK(step >= 1, op, ": the step counts from 1, got ", step);
  FANOUT_CHECK(n >= 0, op, ": negative element count ", n);
  check_arg(op, "params", stream, params, DType::f32, n);
  check_arg(op, "grads", stream, grads, DType::f32, n);
  check_arg(op, "m", stream, m, DType::f32, n);
  check_arg(op, "v", stream, v, DType::f32, n);
  if (working.defined()) check_arg(op, "working", stream, working, DType::bf16, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::adamw_update(params.data<float>(), grads.data<float>(), m.data<float>(),
                          v.data<float>(), n, config.lr, config.beta1, config.beta2, config.eps,
                          config.weight_decay, step, grad_scale,
                          working.defined() ? working.data<uint16_t>() : nullptr);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::adamw_update_f32(stream.cuda_handle(), params.data<float>(), grads.data<float>(),
                             m.data<float>(), v.data<float>(), n, config.lr, config.beta1,
                             config.beta2, config.eps, config.weight_decay, step, grad_scale,
                             working.defined() ? working.data<uint16_t>() : nullptr);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
