#include "ops/cross_entropy.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cuda/cross_entropy.h"

namespace fanout::ops {

void cross_entropy_forward(Stream& stream, const Tensor& stats, const Tensor& logits,
                           const Tensor& targets, int64_t N, int64_t V, int32_t ignore_index) {
  const char* op = "cross_entropy_forward";
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
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

void cross_entropy_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits,
                            const Tensor& targets, int64_t N, int64_t V, int32_t ignore_index,
                            float normalizer) {
  const char* op = "cross_entropy_backward";
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
      FANOUT_CHECK(d_t == DType::f32, op,
                   ": bf16 is not supported on CUDA devices yet (use --precision fp32)");
#ifdef FANOUT_HAS_CUDA
      cuda::cross_entropy_backward_f32(stream.cuda_handle(), dlogits.data<float>(),
                                       logits.data<float>(), targets.data<int32_t>(), N, V,
                                       ignore_index, normalizer);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

}  // namespace fanout::ops
