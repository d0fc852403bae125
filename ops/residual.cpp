#include "ops/residual.h"

#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/residual.h"
#include "ops/cuda/residual.h"

namespace fanout::ops {

void residual_forward(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b,
                      int64_t n) {
  const char* op = "residual_forward";
  OpScope scope(stream, OpClass::elementwise, op);
  check_arg(op, "out", stream, out, DType::f32, n);
  check_arg(op, "a", stream, a, DType::f32, n);
  check_arg(op, "b", stream, b, DType::f32, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue(
          [=] { cpu::residual_forward(out.data<float>(), a.data<float>(), b.data<float>(), n); });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::residual_forward_f32(stream.cuda_handle(), out.data<float>(), a.data<float>(),
                                 b.data<float>(), n);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void residual_backward(Stream& stream, const Tensor& da, const Tensor& db, const Tensor& dout,
                       int64_t n) {
  const char* op = "residual_backward";
  OpScope scope(stream, OpClass::elementwise, op);
  check_arg(op, "da", stream, da, DType::f32, n);
  check_arg(op, "db", stream, db, DType::f32, n);
  check_arg(op, "dout", stream, dout, DType::f32, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::residual_backward(da.data<float>(), db.data<float>(), dout.data<float>(), n);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::residual_backward_f32(stream.cuda_handle(), da.data<float>(), db.data<float>(),
                                  dout.data<float>(), n);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
