#include "ops/rmsnorm.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cuda/rmsnorm.h"

namespace fanout::ops {

void rmsnorm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                     const Tensor& weight, int64_t N, int64_t C, float eps) {
  const char* op = "rmsnorm_forward";
  check_arg(op, "out", stream, out, DType::f32, N * C);
  check_arg(op, "rstd", stream, rstd, DType::f32, N);
  check_arg(op, "inp", stream, inp, DType::f32, N * C);
  check_arg(op, "weight", stream, weight, DType::f32, C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::rmsnorm_forward(out.data<float>(), rstd.data<float>(), inp.data<float>(),
                             weight.data<float>(), N, C, eps);
      });
      return;
    case DeviceKind::cuda:
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
  check_arg(op, "weight", stream, weight, DType::f32, C);
  check_arg(op, "rstd", stream, rstd, DType::f32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::rmsnorm_backward(dinp.data<float>(), dweight.data<float>(), dout.data<float>(),
                              inp.data<float>(), weight.data<float>(), rstd.data<float>(), N, C);
      });
      return;
    case DeviceKind::cuda:
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
