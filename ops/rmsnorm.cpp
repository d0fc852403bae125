#include "ops/rmsnorm.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/rmsnorm.h"

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
      FANOUT_CHECK(false, op, ": the CUDA kernel is not built yet");
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
      FANOUT_CHECK(false, op, ": the CUDA kernel is not built yet");
  }
}

}  // namespace fanout::ops
