#include "ops/swiglu.h"

#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/swiglu.h"
#include "ops/cuda/swiglu.h"

namespace fanout::ops {

void swiglu_forward(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up,
                    int64_t n) {
  const char* op = "swiglu_forward";
  OpScope scope(stream, OpClass::elementwise, op);
  // gate, up, out: all f32 or all bf16.
  const DType X = check_arg_any(op, "gate", stream, gate, {DType::f32, DType::bf16}, n);
  check_arg(op, "up", stream, up, X, n);
  check_arg(op, "out", stream, out, X, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (X == DType::f32)
          cpu::swiglu_forward(out.data<float>(), gate.data<float>(), up.data<float>(), n);
        else
          cpu::swiglu_forward(out.data<cpu::bf16>(), gate.data<cpu::bf16>(), up.data<cpu::bf16>(),
                              n);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (X == DType::f32)
        cuda::swiglu_forward(stream.cuda_handle(), out.data<float>(), gate.data<float>(),
                             up.data<float>(), n);
      else
        cuda::swiglu_forward(stream.cuda_handle(), out.data<uint16_t>(), gate.data<uint16_t>(),
                             up.data<uint16_t>(), n);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void swiglu_backward(Stream& stream, const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                     const Tensor& gate, const Tensor& up, int64_t n) {
  const char* op = "swiglu_backward";
  OpScope scope(stream, OpClass::elementwise, op);
  // gate, up, dgate, dup share one dtype X (f32 or bf16); dout is f32 or bf16 on its own.
  const DType X = check_arg_any(op, "gate", stream, gate, {DType::f32, DType::bf16}, n);
  check_arg(op, "up", stream, up, X, n);
  check_arg(op, "dgate", stream, dgate, X, n);
  check_arg(op, "dup", stream, dup, X, n);
  const DType G = check_arg_any(op, "dout", stream, dout, {DType::f32, DType::bf16}, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        auto run = [&]<typename Xs, typename Gs>() {
          cpu::swiglu_backward(dgate.data<Xs>(), dup.data<Xs>(), dout.data<Gs>(), gate.data<Xs>(),
                               up.data<Xs>(), n);
        };
        using cpu::bf16;
        if (X == DType::f32)
          G == DType::f32 ? run.operator()<float, float>() : run.operator()<float, bf16>();
        else
          G == DType::f32 ? run.operator()<bf16, float>() : run.operator()<bf16, bf16>();
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
    {
      // The same storage switch, bf16 as its raw bits.
      auto run = [&]<typename Xs, typename Gs>() {
        cuda::swiglu_backward(stream.cuda_handle(), dgate.data<Xs>(), dup.data<Xs>(),
                              dout.data<Gs>(), gate.data<Xs>(), up.data<Xs>(), n);
      };
      if (X == DType::f32)
        G == DType::f32 ? run.operator()<float, float>() : run.operator()<float, uint16_t>();
      else
        G == DType::f32 ? run.operator()<uint16_t, float>() : run.operator()<uint16_t, uint16_t>();
      return;
    }
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
