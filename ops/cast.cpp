#include "ops/cast.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/cast.h"

namespace fanout::ops {

void cast_f32_to_bf16(Stream& stream, const Tensor& dst, const Tensor& src, int64_t n) {
  const char* op = "cast_f32_to_bf16";
  check_arg(op, "dst", stream, dst, DType::bf16, n);
  check_arg(op, "src", stream, src, DType::f32, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] { cpu::cast_f32_to_bf16(dst.data<uint16_t>(), src.data<float>(), n); });
      return;
    case DeviceKind::cuda:
      FANOUT_CHECK(false, op, ": the CUDA kernel is not built yet");
  }
}

void cast_bf16_to_f32(Stream& stream, const Tensor& dst, const Tensor& src, int64_t n) {
  const char* op = "cast_bf16_to_f32";
  check_arg(op, "dst", stream, dst, DType::f32, n);
  check_arg(op, "src", stream, src, DType::bf16, n);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] { cpu::cast_bf16_to_f32(dst.data<float>(), src.data<uint16_t>(), n); });
      return;
    case DeviceKind::cuda:
      FANOUT_CHECK(false, op, ": the CUDA kernel is not built yet");
  }
}

}  // namespace fanout::ops
