#include "ops/attention.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/bf16.h"
#include "ops/cuda/attention.h"

namespace fanout::ops {

namespace {

void check_heads(const char* op, int64_t H, int64_t KV, int64_t D) {
  FANOUT_ASSERT(H > 0 && KV > 0 && D > 0, op, ": H ", H, ", KV ", KV, ", D ", D);
  FANOUT_ASSERT(H % KV == 0, op, ": ", H, " query heads are not a multiple of ", KV, " kv heads");
}

}  // namespace

// ---

void attention_forward(Stream& stream, const Tensor& out, const Tensor& lse, const Tensor& q,
                       const Tensor& k, const Tensor& v, int64_t B, int64_t Tq, int64_t Tk,
                       int64_t H, int64_t KV, int64_t D) {
  const char* op = "attention_forward";
  check_heads(op, H, KV, D);
  FANOUT_ASSERT(Tk >= Tq, op, ": ", Tq, " queries but only ", Tk, " keys");
  // q, k, v, out share one storage dtype X (f32 or bf16); lse is f32.
  const DType X = check_arg_any(op, "q", stream, q, {DType::f32, DType::bf16}, B * Tq * H * D);
  check_arg(op, "out", stream, out, X, B * Tq * H * D);
  check_arg(op, "lse", stream, lse, DType::f32, B * H * Tq);
  check_arg(op, "k", stream, k, X, B * Tk * KV * D);
  check_arg(op, "v", stream, v, X, B * Tk * KV * D);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      if (X == DType::f32)
        stream.enqueue([=] {
          cpu::attention_forward_tiled(out.data<float>(), lse.data<float>(), q.data<float>(),
                                       k.data<float>(), v.data<float>(), B, Tq, Tk, H, KV, D);
        });
      else
        stream.enqueue([=] {
          using cpu::bf16;
          cpu::attention_forward_tiled(out.data<bf16>(), lse.data<float>(), q.data<bf16>(),
                                       k.data<bf16>(), v.data<bf16>(), B, Tq, Tk, H, KV, D);
        });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      FANOUT_CHECK(X == DType::f32, op,
                   ": bf16 is not supported on CUDA devices yet (use --precision fp32)");
      cuda::attention_forward_f32(stream.cuda_handle(), out.data<float>(), lse.data<float>(),
                                  q.data<float>(), k.data<float>(), v.data<float>(), B, Tq, Tk, H,
                                  KV, D);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

void attention_backward(Stream& stream, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, int64_t B, int64_t T, int64_t H,
                        int64_t KV, int64_t D) {
  const char* op = "attention_backward";
  check_heads(op, H, KV, D);
  // q, k, v, out and the gradients dq, dk, dv share one storage dtype X; dout is f32
  // or bf16 on its own; lse is f32.
  const DType X = check_arg_any(op, "q", stream, q, {DType::f32, DType::bf16}, B * T * H * D);
  const DType G = check_arg_any(op, "dout", stream, dout, {DType::f32, DType::bf16}, B * T * H * D);
  check_arg(op, "dq", stream, dq, X, B * T * H * D);
  check_arg(op, "dk", stream, dk, X, B * T * KV * D);
  check_arg(op, "dv", stream, dv, X, B * T * KV * D);
  check_arg(op, "k", stream, k, X, B * T * KV * D);
  check_arg(op, "v", stream, v, X, B * T * KV * D);
  check_arg(op, "out", stream, out, X, B * T * H * D);
  check_arg(op, "lse", stream, lse, DType::f32, B * H * T);
  switch (stream.device().kind) {
    case DeviceKind::cpu: {
      // One instantiation per (X, G); the lambda is built per combination.
      auto run = [&]<typename XS, typename GS>() {
        stream.enqueue([=] {
          cpu::attention_backward_tiled(dq.data<XS>(), dk.data<XS>(), dv.data<XS>(),
                                        dout.data<GS>(), q.data<XS>(), k.data<XS>(), v.data<XS>(),
                                        out.data<XS>(), lse.data<float>(), B, T, H, KV, D);
        });
      };
      using cpu::bf16;
      if (X == DType::f32)
        G == DType::f32 ? run.operator()<float, float>() : run.operator()<float, bf16>();
      else
        G == DType::f32 ? run.operator()<bf16, float>() : run.operator()<bf16, bf16>();
      return;
    }
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      FANOUT_CHECK(X == DType::f32 && G == DType::f32, op,
                   ": bf16 is not supported on CUDA devices yet (use --precision fp32)");
      cuda::attention_backward_f32(stream.cuda_handle(), dq.data<float>(), dk.data<float>(),
                                   dv.data<float>(), dout.data<float>(), q.data<float>(),
                                   k.data<float>(), v.data<float>(), out.data<float>(),
                                   lse.data<float>(), B, T, H, KV, D);
      return;
#else
      FANOUT_CHECK(false, op, ": this build has no CUDA backend");
#endif
  }
}

}  // namespace fanout::ops
