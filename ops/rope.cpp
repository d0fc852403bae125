#include "ops/rope.h"

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/rope.h"
#include "ops/cuda/rope.h"

namespace fanout::ops {

void rope_forward(Stream& stream, const Tensor& out, const Tensor& inp, int64_t B, int64_t T,
                  int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset) {
  const char* op = "rope_forward";
  OpScope scope(stream, OpClass::elementwise, op);
  FANOUT_ASSERT(D % 2 == 0, op, ": head dim ", D, " is odd");
  FANOUT_ASSERT(pos_offset >= 0, op, ": pos_offset ", pos_offset, " is negative");
  // f32 or bf16, the same for both (they may alias).
  const DType X = check_arg_any(op, "inp", stream, inp, {DType::f32, DType::bf16}, B * T * H * D);
  check_arg(op, "out", stream, out, X, B * T * H * D);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (X == DType::f32)
          cpu::rope_forward(out.data<float>(), inp.data<float>(), B, T, H, D, freq, pos_offset);
        else
          cpu::rope_forward(out.data<cpu::bf16>(), inp.data<cpu::bf16>(), B, T, H, D, freq,
                            pos_offset);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (X == DType::f32)
        cuda::rope_forward(stream.cuda_handle(), out.data<float>(), inp.data<float>(), B, T, H, D,
                           freq, pos_offset);
      else
        cuda::rope_forward(stream.cuda_handle(), out.data<uint16_t>(), inp.data<uint16_t>(), B, T,
                           H, D, freq, pos_offset);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void rope_backward(Stream& stream, const Tensor& dinp, const Tensor& dout, int64_t B, int64_t T,
                   int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset) {
  const char* op = "rope_backward";
  OpScope scope(stream, OpClass::elementwise, op);
  FANOUT_ASSERT(D % 2 == 0, op, ": head dim ", D, " is odd");
  FANOUT_ASSERT(pos_offset >= 0, op, ": pos_offset ", pos_offset, " is negative");
  // f32 or bf16, the same for both (they may alias).
  const DType X = check_arg_any(op, "dout", stream, dout, {DType::f32, DType::bf16}, B * T * H * D);
  check_arg(op, "dinp", stream, dinp, X, B * T * H * D);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (X == DType::f32)
          cpu::rope_backward(dinp.data<float>(), dout.data<float>(), B, T, H, D, freq, pos_offset);
        else
          cpu::rope_backward(dinp.data<cpu::bf16>(), dout.data<cpu::bf16>(), B, T, H, D, freq,
                             pos_offset);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (X == DType::f32)
        cuda::rope_backward(stream.cuda_handle(), dinp.data<float>(), dout.data<float>(), B, T, H,
                            D, freq, pos_offset);
      else
        cuda::rope_backward(stream.cuda_handle(), dinp.data<uint16_t>(), dout.data<uint16_t>(), B,
                            T, H, D, freq, pos_offset);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
