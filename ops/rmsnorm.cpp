#include "ops/rmsnorm.h"

#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cuda/rmsnorm.h"

namespace fanout::ops {

void rmsnorm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                     const Tensor& weight, int64_t N, int64_t C, float eps) {
  const char* op = "rmsnorm_forward";
  OpScope scope(stream, OpClass::elementwise, op);
  // The bf16 contract: out and weight f32 or bf16, the statistics and input f32.
  const DType out_t = check_arg_any(op, "out", stream, out, {DType::f32, DType::bf16}, N * C);
  check_arg(op, "rstd", stream, rstd, DType::f32, N);
  check_arg(op, "inp", stream, inp, DType::f32, N * C);
  const DType w_t = check_arg_any(op, "weight", stream, weight, {DType::f32, DType::bf16}, C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        auto run = [&]<typename Out, typename W>() {
          cpu::rmsnorm_forward<float>(out.data<Out>(), rstd.data<float>(), inp.data<float>(),
                                      weight.data<W>(), N, C, eps);
        };
        using cpu::bf16;
        if (out_t == DType::f32)
          w_t == DType::f32 ? run.operator()<float, float>() : run.operator()<float, bf16>();
        else
          w_t == DType::f32 ? run.operator()<bf16, float>() : run.operator()<bf16, bf16>();
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
    {
      // The same storage switch, bf16 as its raw bits.
      auto run = [&]<typename Out, typename W>() {
        cuda::rmsnorm_forward(stream.cuda_handle(), out.data<Out>(), rstd.data<float>(),
                              inp.data<float>(), weight.data<W>(), N, C, eps);
      };
      if (out_t == DType::f32)
        w_t == DType::f32 ? run.operator()<float, float>() : run.operator()<float, uint16_t>();
      else
        w_t == DType::f32 ? run.operator()<uint16_t, float>()
                          : run.operator()<uint16_t, uint16_t>();
      return;
    }
#else
      no_cuda_backend(op);
#endif
  }
}

void rmsnorm_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                      const Tensor& inp, const Tensor& weight, const Tensor& rstd, int64_t N,
                      int64_t C) {
  const char* op = "rmsnorm_backward";
  OpScope scope(stream, OpClass::elementwise, op);
  check_arg(op, "dinp", stream, dinp, DType::f32, N * C);
  check_arg(op, "dweight", stream, dweight, DType::f32, C);
  check_arg(op, "dout", stream, dout, DType::f32, N * C);
  check_arg(op, "inp", stream, inp, DType::f32, N * C);
  const DType w_t = check_arg_any(op, "weight", stream, weight, {DType::f32, DType::bf16}, C);
  check_arg(op, "rstd", stream, rstd, DType::f32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        auto run = [&]<typename W>() {
          cpu::rmsnorm_backward<float>(dinp.data<float>(), dweight.data<float>(),
                                       dout.data<float>(), inp.data<float>(), weight.data<W>(),
                                       rstd.data<float>(), N, C);
        };
        w_t == DType::f32 ? run.operator()<float>() : run.operator()<cpu::bf16>();
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (w_t == DType::f32)
        cuda::rmsnorm_backward(stream.cuda_handle(), dinp.data<float>(), dweight.data<float>(),
                               dout.data<float>(), inp.data<float>(), weight.data<float>(),
                               rstd.data<float>(), N, C);
      else
        cuda::rmsnorm_backward(stream.cuda_handle(), dinp.data<float>(), dweight.data<float>(),
                               dout.data<float>(), inp.data<float>(), weight.data<uint16_t>(),
                               rstd.data<float>(), N, C);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
