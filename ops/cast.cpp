#include "ops/cast.h"

#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/cast.h"
#include "ops/cuda/cast.h"

namespace fanout::ops {

void cast_f32_to_bf16(Stream& stream, const Tensor& dst, const Tensor& src, int64_t n) {
  const char* op = "cast_f32_to_bf16";
  OpScope scope(stream, OpClass::elementwise, op);
  check_arg(op, "dst", stream, dst, DType::bf16, n);
  check_arg(op, "src", stream, src, DType::f32, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] { cpu::cast_f32_to_bf16(dst.data<uint16_t>(), src.data<float>(), n); });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::cast_f32_to_bf16(stream.cuda_handle(), dst.data<uint16_t>(), src.data<float>(), n);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void cast_bf16_to_f32(Stream& stream, const Tensor& dst, const Tensor& src, int64_t n) {
  const char* op = "cast_bf16_to_f32";
  OpScope scope(stream, OpClass::elementwise, op);
  check_arg(op, "dst", stream, dst, DType::f32, n);
  check_arg(op, "src", stream, src, DType::bf16, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] { cpu::cast_bf16_to_f32(dst.data<float>(), src.data<uint16_t>(), n); });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::cast_bf16_to_f32(stream.cuda_handle(), dst.data<float>(), src.data<uint16_t>(), n);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
