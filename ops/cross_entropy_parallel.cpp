#include "ops/cross_entropy_parallel.h"

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/cross_entropy_parallel.h"
#include "ops/cuda/cross_entropy_parallel.h"

namespace fanout::ops {

namespace {
void check_shard(const char* op, int64_t N, int64_t cols, int64_t ld, int64_t v0) {
  FANOUT_CHECK(N >= 0 && cols >= 0 && ld >= cols && v0 >= 0, op,
               ": needs N >= 0 rows of cols >= 0 valid columns, ld >= cols apart, from ",
               "vocabulary id v0 >= 0; got N = ", N, ", cols = ", cols, ", ld = ", ld,
               ", v0 = ", v0);
}
// Elements N rows of cols, ld apart, span.
int64_t span(int64_t N, int64_t cols, int64_t ld) {
  return N == 0 ? 0 : (N - 1) * ld + cols;
}
}  // namespace

void cross_entropy_shard_forward(Stream& stream, const Tensor& part, const Tensor& logits,
                                 const Tensor& targets, int64_t N, int64_t cols, int64_t ld,
                                 int64_t v0, int64_t V, int32_t ignore_index) {
  const char* op = "cross_entropy_shard_forward";
  OpScope scope(stream, OpClass::loss, op);
  check_shard(op, N, cols, ld, v0);
  FANOUT_CHECK(V > 0 && v0 + cols <= V, op, ": the shard's vocabulary ids [", v0, ", ", v0 + cols,
               ") must lie in [0, V), V = ", V);
  check_arg(op, "part", stream, part, DType::f32, N * 3);
  check_arg(op, "logits", stream, logits, DType::f32, span(N, cols, ld));
  check_arg(op, "targets", stream, targets, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::cross_entropy_shard_forward(part.data<float>(), logits.data<float>(),
                                         targets.data<int32_t>(), N, cols, ld, v0, V, ignore_index);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::cross_entropy_shard_forward(stream.cuda_handle(), part.data<float>(),
                                        logits.data<float>(), targets.data<int32_t>(), N, cols, ld,
                                        v0, V, ignore_index);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void cross_entropy_shard_combine(Stream& stream, const Tensor& stats, const Tensor& lse,
                                 const Tensor& parts, const Tensor& targets, int64_t N, int64_t S,
                                 int32_t ignore_index) {
  const char* op = "cross_entropy_shard_combine";
  OpScope scope(stream, OpClass::loss, op);
  FANOUT_CHECK(N >= 0 && S > 0, op, ": needs N >= 0 rows and S > 0 shards, got N = ", N,
               ", S = ", S);
  check_arg(op, "stats", stream, stats, DType::f32, 2);
  check_arg(op, "lse", stream, lse, DType::f32, N);
  check_arg(op, "parts", stream, parts, DType::f32, S * N * 3);
  check_arg(op, "targets", stream, targets, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::cross_entropy_shard_combine(stats.data<float>(), lse.data<float>(),
                                         parts.data<float>(), targets.data<int32_t>(), N, S,
                                         ignore_index);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::cross_entropy_shard_combine(stream.cuda_handle(), stats.data<float>(),
                                        lse.data<float>(), parts.data<float>(),
                                        targets.data<int32_t>(), N, S, ignore_index);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void cross_entropy_shard_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits,
                                  const Tensor& lse, const Tensor& targets, int64_t N, int64_t cols,
                                  int64_t ld, int64_t v0, int32_t ignore_index, float normalizer) {
  const char* op = "cross_entropy_shard_backward";
  OpScope scope(stream, OpClass::loss, op);
  check_shard(op, N, cols, ld, v0);
  FANOUT_CHECK(normalizer > 0, op, ": the normalizer must be positive (the global count of ",
               "non-ignored targets, or 1 when there are none), got ", normalizer);
  // dlogits f32 (in place over logits, or not) or bf16, then a separate buffer.
  // It is written whole (the padding columns too); the logits are read up to cols.
  const DType d_t =
      check_arg_any(op, "dlogits", stream, dlogits, {DType::f32, DType::bf16}, N * ld);
  check_arg(op, "logits", stream, logits, DType::f32, span(N, cols, ld));
  check_arg(op, "lse", stream, lse, DType::f32, N);
  check_arg(op, "targets", stream, targets, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (d_t == DType::f32)
          cpu::cross_entropy_shard_backward(dlogits.data<float>(), logits.data<float>(),
                                            lse.data<float>(), targets.data<int32_t>(), N, cols, ld,
                                            v0, ignore_index, normalizer);
        else
          cpu::cross_entropy_shard_backward(dlogits.data<cpu::bf16>(), logits.data<float>(),
                                            lse.data<float>(), targets.data<int32_t>(), N, cols, ld,
                                            v0, ignore_index, normalizer);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (d_t == DType::f32)
        cuda::cross_entropy_shard_backward_f32(
            stream.cuda_handle(), dlogits.data<float>(), logits.data<float>(), lse.data<float>(),
            targets.data<int32_t>(), N, cols, ld, v0, ignore_index, normalizer);
      else
        cuda::cross_entropy_shard_backward_f32_to_bf16(
            stream.cuda_handle(), dlogits.data<uint16_t>(), logits.data<float>(), lse.data<float>(),
            targets.data<int32_t>(), N, cols, ld, v0, ignore_index, normalizer);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
