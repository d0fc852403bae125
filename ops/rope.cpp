#include "ops/rope.h"

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/rope.h"
#include "ops/cuda/rope.h"

namespace fanout::ops {

namespace {

// The elements a (B * T) x (H * D) block with rows `ld` apart spans (0: H * D),
// after checking the stride; `ld` becomes the stride itself.
int64_t rope_span(const char* op, const char* name, int64_t& ld, int64_t B, int64_t T, int64_t H,
                  int64_t D) {
  const int64_t row = H * D;
  if (ld == 0) ld = row;
  FANOUT_ASSERT(ld >= row, op, ": ", name, "'s row stride ", ld, " is under H * D = ", row);
  return B * T > 0 ? (B * T - 1) * ld + row : 0;
}

}  // namespace

void rope_forward(Stream& stream, const Tensor& out, const Tensor& inp, int64_t B, int64_t T,
                  int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset, int64_t ld_out,
                  int64_t ld_in) {
  const char* op = "rope_forward";
  OpScope scope(stream, OpClass::elementwise, op);
  FANOUT_ASSERT(D % 2 == 0, op, ": head dim ", D, " is odd");
  FANOUT_ASSERT(pos_offset >= 0, op, ": pos_offset ", pos_offset, " is negative");
  // f32 or bf16, the same for both (they may alias).
  const int64_t span_in = rope_span(op, "inp", ld_in, B, T, H, D);
  const int64_t span_out = rope_span(op, "out", ld_out, B, T, H, D);
  const DType X = check_arg_any(op, "inp", stream, inp, {DType::f32, DType::bf16}, span_in);
  check_arg(op, "out", stream, out, X, span_out);
  FANOUT_ASSERT(out.raw() != inp.raw() || ld_out == ld_in, op,
                ": out aliases inp with another stride");
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (X == DType::f32)
          cpu::rope_forward(out.data<float>(), inp.data<float>(), B, T, H, D, freq, pos_offset,
                            ld_out, ld_in);
        else
          cpu::rope_forward(out.data<cpu::bf16>(), inp.data<cpu::bf16>(), B, T, H, D, freq,
                            pos_offset, ld_out, ld_in);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (X == DType::f32)
        cuda::rope_forward(stream.cuda_handle(), out.data<float>(), inp.data<float>(), B, T, H, D,
                           freq, pos_offset, ld_out, ld_in);
      else
        cuda::rope_forward(stream.cuda_handle(), out.data<uint16_t>(), inp.data<uint16_t>(), B, T,
                           H, D, freq, pos_offset, ld_out, ld_in);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void rope_backward(Stream& stream, const Tensor& dinp, const Tensor& dout, int64_t B, int64_t T,
                   int64_t H, int64_t D, const RopeFreq& freq, int64_t pos_offset, int64_t ld_dinp,
                   int64_t ld_dout) {
  const char* op = "rope_backward";
  OpScope scope(stream, OpClass::elementwise, op);
  FANOUT_ASSERT(D % 2 == 0, op, ": head dim ", D, " is odd");
  FANOUT_ASSERT(pos_offset >= 0, op, ": pos_offset ", pos_offset, " is negative");
  // f32 or bf16, the same for both (they may alias).
  const int64_t span_dout = rope_span(op, "dout", ld_dout, B, T, H, D);
  const int64_t span_dinp = rope_span(op, "dinp", ld_dinp, B, T, H, D);
  const DType X = check_arg_any(op, "dout", stream, dout, {DType::f32, DType::bf16}, span_dout);
  check_arg(op, "dinp", stream, dinp, X, span_dinp);
  FANOUT_ASSERT(dinp.raw() != dout.raw() || ld_dinp == ld_dout, op,
                ": dinp aliases dout with another stride");
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (X == DType::f32)
          cpu::rope_backward(dinp.data<float>(), dout.data<float>(), B, T, H, D, freq, pos_offset,
                             ld_dinp, ld_dout);
        else
          cpu::rope_backward(dinp.data<cpu::bf16>(), dout.data<cpu::bf16>(), B, T, H, D, freq,
                             pos_offset, ld_dinp, ld_dout);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (X == DType::f32)
        cuda::rope_backward(stream.cuda_handle(), dinp.data<float>(), dout.data<float>(), B, T, H,
                            D, freq, pos_offset, ld_dinp, ld_dout);
      else
        cuda::rope_backward(stream.cuda_handle(), dinp.data<uint16_t>(), dout.data<uint16_t>(), B,
                            T, H, D, freq, pos_offset, ld_dinp, ld_dout);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
