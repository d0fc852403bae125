#include "ops/matmul.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/matmul.h"
#include "ops/cuda/matmul.h"

namespace fanout::ops {

void matmul_forward(Stream& stream, const Tensor& out, const Tensor& inp, const Tensor& weight,
                    int64_t N, int64_t C, int64_t OC) {
  const char* op = "matmul_forward";
  check_arg(op, "out", stream, out, DType::f32, N * OC);
  check_arg(op, "inp", stream, inp, DType::f32, N * C);
  check_arg(op, "weight", stream, weight, DType::f32, OC * C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::matmul_forward(out.data<float>(), inp.data<float>(), weight.data<float>(), N, C, OC);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::matmul_forward_f32(stream.cuda_handle(), out.data<float>(), inp.data<float>(),
                               weight.data<float>(), N, C, OC);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

void matmul_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, int64_t N, int64_t C, int64_t OC) {
  const char* op = "matmul_backward";
  if (dinp.defined()) check_arg(op, "dinp", stream, dinp, DType::f32, N * C);
  check_arg(op, "dweight", stream, dweight, DType::f32, OC * C);
  check_arg(op, "dout", stream, dout, DType::f32, N * OC);
  check_arg(op, "inp", stream, inp, DType::f32, N * C);
  check_arg(op, "weight", stream, weight, DType::f32, OC * C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        float* dx = dinp.defined() ? dinp.data<float>() : nullptr;
        cpu::matmul_backward(dx, dweight.data<float>(), dout.data<float>(), inp.data<float>(),
                             weight.data<float>(), N, C, OC);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::matmul_backward_f32(stream.cuda_handle(), dinp.defined() ? dinp.data<float>() : nullptr,
                                dweight.data<float>(), dout.data<float>(), inp.data<float>(),
                                weight.data<float>(), N, C, OC);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

}  // namespace fanout::ops
