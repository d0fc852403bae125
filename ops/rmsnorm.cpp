#include "ops/rmsnorm.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cuda/rmsnorm.h"

namespace fanout::ops {

void rmsnorm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                     const Tensor& weight, int64_t N, int64_t C, float eps) {
  const char* op = "rmsnorm_forward";
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
      FANOUT_CHECK(out_t == DType::f32 && w_t == DType::f32, op,
                   ": bf16 is not supported on CUDA devices yet (use --precision fp32)");
#ifdef FANOUT_HAS_CUDA
      cuda::rmsnorm_forward_f32(stream.cuda_handle(), out.data<float>(), rstd.data<float>(),
                                inp.data<float>(), weight.data<float>(), N, C, eps);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

void rmsnorm_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                      const Tensor& inp, const Tensor& weight, const Tensor& rstd, int64_t N,
                      int64_t C) {
  const char* op = "rmsnorm_backward";
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
      FANOUT_CHECK(w_t == DType::f32, op,
                   ": bf16 is not supported on CUDA devices yet (use --precision fp32)");
#ifdef FANOUT_HAS_CUDA
      cuda::rmsnorm_backward_f32(stream.cuda_handle(), dinp.data<float>(), dweight.data<float>(),
                                 dout.data<float>(), inp.data<float>(), weight.data<float>(),
                                 rstd.data<float>(), N, C);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

}  // namespace fanout::ops
