#include "ops/attention.h"

#include <atomic>

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/bf16.h"
#ifdef FANOUT_HAS_CUDA
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_cudnn.h"
#endif

namespace fanout::ops {

namespace {

#ifdef FANOUT_HAS_CUDNN
constexpr bool kBuildHasCudnn = true;
#else
constexpr bool kBuildHasCudnn = false;
#endif

std::atomic<AttentionImpl> g_impl{AttentionImpl::automatic};

// Whether cuDNN loads, asked only where the answer matters (it makes a handle).
bool cudnn_loads_if_asked(AttentionImpl impl, bool bf16) {
#ifdef FANOUT_HAS_CUDNN
  if (impl != AttentionImpl::exact && bf16) return cuda::attention_cudnn_loads();
#else
  (void)impl, (void)bf16;
#endif
  return false;
}

#ifdef FANOUT_HAS_CUDA
// The path of one call on a CUDA device (FANOUT_CHECKs an impossible setting).
AttentionPath cuda_path(bool bf16) {
  const AttentionImpl impl = attention_impl();
  return attention_path(impl, true, bf16, kBuildHasCudnn, cudnn_loads_if_asked(impl, bf16));
}
#endif

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
  OpScope scope(stream, OpClass::attention, op);
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
    {
      const bool bf16 = X == DType::bf16;
#ifdef FANOUT_HAS_CUDNN
      // Tq < Tk (a KV cache) is the exact kernel's; a refusal falls back to it.
      if (cuda_path(bf16) == AttentionPath::cudnn && Tq == Tk &&
          cuda::attention_cudnn_forward(stream.cuda_handle(), out.data<uint16_t>(),
                                        lse.data<float>(), q.data<uint16_t>(), k.data<uint16_t>(),
                                        v.data<uint16_t>(), B, Tq, H, KV, D))
        return;
#else
      cuda_path(bf16);  // FANOUT_CHECKs --attention cudnn
#endif
      cuda::attention_forward_exact(stream.cuda_handle(), bf16, out.raw(), lse.data<float>(),
                                    q.raw(), k.raw(), v.raw(), B, Tq, Tk, H, KV, D);
      return;
    }
#else
      no_cuda_backend(op);
#endif
  }
}

void attention_backward(Stream& stream, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, int64_t B, int64_t T, int64_t H,
                        int64_t KV, int64_t D) {
  const char* op = "attention_backward";
  OpScope scope(stream, OpClass::attention, op);
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
    {
      const bool bf16 = X == DType::bf16, dout_bf16 = G == DType::bf16;
#ifdef FANOUT_HAS_CUDNN
      if (cuda_path(bf16) == AttentionPath::cudnn &&
          cuda::attention_cudnn_backward(
              stream.cuda_handle(), dq.data<uint16_t>(), dk.data<uint16_t>(), dv.data<uint16_t>(),
              dout.raw(), dout_bf16, q.data<uint16_t>(), k.data<uint16_t>(), v.data<uint16_t>(),
              out.data<uint16_t>(), lse.data<float>(), B, T, H, KV, D))
        return;
#else
      cuda_path(bf16);
#endif
      cuda::attention_backward_exact(stream.cuda_handle(), bf16, dout_bf16, dq.raw(), dk.raw(),
                                     dv.raw(), dout.raw(), q.raw(), k.raw(), v.raw(), out.raw(),
                                     lse.data<float>(), B, T, H, KV, D);
      return;
    }
#else
      no_cuda_backend(op);
#endif
  }
}

// ---

void attention_set_impl(AttentionImpl impl) {
  g_impl.store(impl);
}

AttentionImpl attention_impl() {
  return g_impl.load();
}

std::string attention_describe(Device device, DType dtype) {
  const bool bf16 = dtype == DType::bf16;
  if (device.is_cpu()) {
    if (bf16 && cpu::attention_bf16_dot_enabled()) return "CPU tiled kernel (AVX512-BF16 dots)";
    return "CPU tiled kernel (fp32 math)";
  }
  const AttentionImpl impl = attention_impl();
  const bool loads = cudnn_loads_if_asked(impl, bf16);
  int64_t version = 0, refusals = 0;
#ifdef FANOUT_HAS_CUDNN
  if (loads) version = cuda::attention_cudnn_version(), refusals = cuda::attention_cudnn_refusals();
#endif
  return attention_describe_cuda(impl, bf16, kBuildHasCudnn, loads, version, refusals);
}

AttentionImpl attention_impl_parse(const std::string& name) {
  if (name == "auto") return AttentionImpl::automatic;
  if (name == "exact") return AttentionImpl::exact;
  if (name == "cudnn") return AttentionImpl::cudnn;
  FANOUT_CHECK(false, "--attention: unknown kernel '", name, "' (choose auto, exact or cudnn)");
  return AttentionImpl::automatic;
}

}  // namespace fanout::ops
