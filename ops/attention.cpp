#include "ops/attention.h"

#include "engine/core/check.h"
#include "ops/check_args.h"
#include "ops/cpu/attention.h"
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
  check_arg(op, "out", stream, out, DType::f32, B * Tq * H * D);
  check_arg(op, "lse", stream, lse, DType::f32, B * H * Tq);
  check_arg(op, "q", stream, q, DType::f32, B * Tq * H * D);
  check_arg(op, "k", stream, k, DType::f32, B * Tk * KV * D);
  check_arg(op, "v", stream, v, DType::f32, B * Tk * KV * D);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::attention_forward(out.data<float>(), lse.data<float>(), q.data<float>(),
                               k.data<float>(), v.data<float>(), B, Tq, Tk, H, KV, D);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
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
  check_arg(op, "dq", stream, dq, DType::f32, B * T * H * D);
  check_arg(op, "dk", stream, dk, DType::f32, B * T * KV * D);
  check_arg(op, "dv", stream, dv, DType::f32, B * T * KV * D);
  check_arg(op, "dout", stream, dout, DType::f32, B * T * H * D);
  check_arg(op, "q", stream, q, DType::f32, B * T * H * D);
  check_arg(op, "k", stream, k, DType::f32, B * T * KV * D);
  check_arg(op, "v", stream, v, DType::f32, B * T * KV * D);
  check_arg(op, "out", stream, out, DType::f32, B * T * H * D);
  check_arg(op, "lse", stream, lse, DType::f32, B * H * T);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::attention_backward(dq.data<float>(), dk.data<float>(), dv.data<float>(),
                                dout.data<float>(), q.data<float>(), k.data<float>(),
                                v.data<float>(), out.data<float>(), lse.data<float>(), B, T, H, KV,
                                D);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
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
