#include "ops/cross_entropy.h"

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cuda/cross_entropy.h"

namespace fanout::ops {

void cross_entropy_forward(Stream& stream, const Tensor& stats, const Tensor& logits,
                           const Tensor& targets, int64_t N, int64_t V, int32_t ignore_index) {
  const char* op = "cross_entropy_forward";
  OpScope scope(stream, OpClass::loss, op);
  FANOUT_CHECK(N >= 0 && V > 0, op, ": needs N >= 0 rows and V > 0 classes, got N = ", N,
               ", V = ", V);
  check_arg(op, "stats", stream, stats, DType::f32, 2);
  check_arg(op, "logits", stream, logits, DType::f32, N * V);
  check_arg(op, "targets", stream, targets, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::cross_entropy_forward(stats.data<float>(), logits.data<float>(),
                                   targets.data<int32_t>(), N, V, ignore_index);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::cross_entropy_forward_f32(stream.cuda_handle(), stats.data<float>(),
                                      logits.data<float>(), targets.data<int32_t>(), N, V,
                                      ignore_index);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void cross_entropy_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits,
                            const Tensor& targets, int64_t N, int64_t V, int32_t ignore_index,
                            float normalizer) {
  const char* op = "cross_entropy_backward";
  OpScope scope(stream, OpClass::loss, op);
  FANOUT_CHECK(N >= 0 && V > 0, op, ": needs N >= 0 rows and V > 0 classes, got N = ", N,
               ", V = ", V);
  FANOUT_CHECK(normalizer > 0, op, ": the normalizer must be positive (the global count of ",
               "non-ignored targets, or 1 when there are none), got ", normalizer);
  // dlogits f32 (in place over logits, or not) or bf16, then necessarily a separate
  // buffer: no tensor views one storage under two dtypes.
  const DType d_t = check_arg_any(op, "dlogits", stream, dlogits, {DType::f32, DType::bf16}, N * V);
  check_arg(op, "logits", stream, logits, DType::f32, N * V);
  check_arg(op, "targets", stream, targets, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (d_t == DType::f32)
          cpu::cross_entropy_backward(dlogits.data<float>(), logits.data<float>(),
                                      targets.data<int32_t>(), N, V, ignore_index, normalizer);
        else
          cpu::cross_entropy_backward(dlogits.data<cpu::bf16>(), logits.data<float>(),
                                      targets.data<int32_t>(), N, V, ignore_index, normalizer);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (d_t == DType::f32)
        cuda::cross_entropy_backward_f32(stream.cuda_handle(), dlogits.data<float>(),
                                         logits.data<float>(), targets.data<int32_t>(), N, V,
                                         ignore_index, normalizer);
      else
        cuda::cross_entropy_backward_f32_to_bf16(stream.cuda_handle(), dlogits.data<uint16_t>(),
                                                 logits.data<float>(), targets.data<int32_t>(), N,
                                                 V, ignore_index, normalizer);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

// ---------------------------------------------------------------------------

namespace {
void check_fused(const char* op, int64_t N, int64_t V, int64_t ld, float normalizer) {
  FANOUT_CHECK(N >= 0 && V > 0 && ld >= V, op, ": needs N >= 0 rows, V > 0 classes and rows ",
               "ld >= V apart, got N = ", N, ", V = ", V, ", ld = ", ld);
  FANOUT_CHECK(normalizer > 0, op, ": the normalizer must be positive, got ", normalizer);
}
// Elements an (N, V) matrix with rows ld apart spans.
int64_t span(int64_t N, int64_t V, int64_t ld) {
  return N == 0 ? 0 : (N - 1) * ld + V;
}
}  // namespace

void cross_entropy_fused_forward(Stream& stream, const Tensor& stats, const Tensor& lse,
                                 const Tensor& logits, const Tensor& targets, int64_t N, int64_t V,
                                 int64_t ld, int32_t ignore_index) {
  const char* op = "cross_entropy_fused_forward";
  OpScope scope(stream, OpClass::loss, op);
  check_fused(op, N, V, ld, 1.0f);
  check_arg(op, "stats", stream, stats, DType::f32, 2);
  check_arg(op, "lse", stream, lse, DType::f32, N);
  check_arg(op, "logits", stream, logits, DType::bf16, span(N, V, ld));
  check_arg(op, "targets", stream, targets, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::cross_entropy_fused_forward(stats.data<float>(), lse.data<float>(),
                                         logits.data<cpu::bf16>(), targets.data<int32_t>(), N, V,
                                         ld, ignore_index);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::cross_entropy_fused_forward(stream.cuda_handle(), stats.data<float>(),
                                        lse.data<float>(), logits.data<uint16_t>(),
                                        targets.data<int32_t>(), N, V, ld, ignore_index);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void cross_entropy_fused_backward(Stream& stream, const Tensor& logits, const Tensor& lse,
                                  const Tensor& targets, int64_t N, int64_t V, int64_t ld,
                                  int32_t ignore_index, float normalizer) {
  const char* op = "cross_entropy_fused_backward";
  OpScope scope(stream, OpClass::loss, op);
  check_fused(op, N, V, ld, normalizer);
  check_arg(op, "logits", stream, logits, DType::bf16, span(N, V, ld));
  check_arg(op, "lse", stream, lse, DType::f32, N);
  check_arg(op, "targets", stream, targets, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::cross_entropy_fused_backward(logits.data<cpu::bf16>(), lse.data<float>(),
                                          targets.data<int32_t>(), N, V, ld, ignore_index,
                                          normalizer);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::cross_entropy_fused_backward(stream.cuda_handle(), logits.data<uint16_t>(),
                                         lse.data<float>(), targets.data<int32_t>(), N, V, ld,
                                         ignore_index, normalizer);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
