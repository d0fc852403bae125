#include "ops/swiglu.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/swiglu.h"
#include "ops/cuda/swiglu.h"

namespace fanout::ops {

void swiglu_forward(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up,
                    int64_t n) {
  const char* op = "swiglu_forward";
  check_arg(op, "out", stream, out, DType::f32, n);
  check_arg(op, "gate", stream, gate, DType::f32, n);
  check_arg(op, "up", stream, up, DType::f32, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue(
          [=] { cpu::swiglu_forward(out.data<float>(), gate.data<float>(), up.data<float>(), n); });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::swiglu_forward_f32(stream.cuda_handle(), out.data<float>(), gate.data<float>(),
                               up.data<float>(), n);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

void swiglu_backward(Stream& stream, const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                     const Tensor& gate, const Tensor& up, int64_t n) {
  const char* op = "swiglu_backward";
  check_arg(op, "dgate", stream, dgate, DType::f32, n);
  check_arg(op, "dup", stream, dup, DType::f32, n);
  check_arg(op, "dout", stream, dout, DType::f32, n);
  check_arg(op, "gate", stream, gate, DType::f32, n);
  check_arg(op, "up", stream, up, DType::f32, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::swiglu_backward(dgate.data<float>(), dup.data<float>(), dout.data<float>(),
                             gate.data<float>(), up.data<float>(), n);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::swiglu_backward_f32(stream.cuda_handle(), dgate.data<float>(), dup.data<float>(),
                                dout.data<float>(), gate.data<float>(), up.data<float>(), n);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

}  // namespace fanout::ops
