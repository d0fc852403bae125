#pragma once
// Causal grouped-query attention as HF Llama computes it: scale D^-0.5, query head
// h reads kv head h / (H / KV) (adjacent query heads share one kv head, as HF's
// repeat_kv), softmax over keys j <= Tk - Tq + i. Forward saves the log-sum-exp of
// each query's scaled scores so backward recomputes the probabilities. Storage is f32
// or bf16 (the bf16 contract: q, k, v, out and dq, dk, dv share one dtype, dout may
// be either, lse is f32; math is fp32). CPU devices run both; CUDA devices run the
// exact kernels in both, or cuDNN's fused attention in bf16 (attention_set_impl).

#include <cstdint>
#include <string>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "ops/attention_plan.h"

namespace fanout::ops {

// out (B, Tq, H, D) = attention(q (B, Tq, H, D), k, v (B, Tk, KV, D)); lse (B, H, Tq)
// saved for backward. Query i sits at absolute position Tk - Tq + i (Tk >= Tq: a KV
// cache holds the earlier positions). H % KV == 0. Overwrites out and lse.
void attention_forward(Stream& stream, const Tensor& out, const Tensor& lse, const Tensor& q,
                       const Tensor& k, const Tensor& v, int64_t B, int64_t Tq, int64_t Tk,
                       int64_t H, int64_t KV, int64_t D);

// Training backward (Tq == Tk == T): dq (B, T, H, D), dk, dv (B, T, KV, D) from
// dout (B, T, H, D), with out and lse from attention_forward. dk and dv sum over the
// query heads of their group. Overwrites dq, dk, dv.
void attention_backward(Stream& stream, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, int64_t B, int64_t T, int64_t H,
                        int64_t KV, int64_t D);

// ---

// The kernel CUDA devices use (AttentionImpl in ops/attention_plan.h), process-wide;
// default automatic: cuDNN's fused attention for bf16 when the build has cuDNN and
// the library loads, the exact kernel otherwise. `cudnn` with f32 storage, or in a
// build without cuDNN, is an error at the first call. A shape cuDNN refuses runs
// the exact kernel, with one line on stderr. CPU devices ignore the setting.
void attention_set_impl(AttentionImpl impl);
AttentionImpl attention_impl();

// One line for logs: what attention on `device` with `dtype` storage runs, e.g.
// "cuDNN fused SDPA (cuDNN 9.19.0)", "exact kernel", "exact kernel (this build has
// no cuDNN)", and for CPU devices the CPU kernel's name.
std::string attention_describe(Device device, DType dtype);

// "auto", "exact" or "cudnn"; anything else is a FANOUT_CHECK error listing them.
AttentionImpl attention_impl_parse(const std::string& name);

}  // namespace fanout::ops
