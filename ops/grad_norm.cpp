#include "ops/grad_norm.h"

#include <cmath>

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/grad_norm.h"
#include "ops/cuda/grad_norm.h"

namespace fanout::ops {

void norm_squared(Stream& stream, const Tensor& out, const Tensor& buf, int64_t n) {
  const char* op = "norm_squared";
  OpScope scope(stream, OpClass::optimizer, op);
  FANOUT_CHECK(n >= 0, op, ": negative element count ", n);
  check_arg(op, "out", stream, out, DType::f32, 1);
  check_arg(op, "buf", stream, buf, DType::f32, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] { cpu::norm_squared(out.data<float>(), buf.data<float>(), n); });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::norm_squared_f32(stream.cuda_handle(), out.data<float>(), buf.data<float>(), n);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

float clip_coefficient(double total_norm, double max_norm) {
  double coef = max_norm / (total_norm + 1e-6);
  // Written so that a NaN norm gives a NaN coefficient (std::min would give 1).
  return static_cast<float>(coef < 1.0 || std::isnan(coef) ? coef : 1.0);
}

}  // namespace fanout::ops
