#pragma once
// Cross-entropy fused with the softmax over the vocabulary, as
// F.cross_entropy(logits, targets, ignore_index=..., reduction="sum") computes it,
// split so that data parallelism can normalise by the *global* token count: forward
// returns (loss sum, counted rows), backward takes the normaliser explicitly.
// Shapes: N rows (B*T) of V logits; targets are i32 token ids.

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// stats (2) = {sum over counted rows of -log softmax(logits[n])[targets[n]],
//              number of counted rows}, from logits (N, V) and targets (N).
// A row whose target is ignore_index is not counted; any other target outside
// [0, V) throws fanout::Error (at stream.synchronize(), as it is found in the kernel).
// The count is exact in f32 up to 2^24 rows per call.
void cross_entropy_forward(Stream& stream, const Tensor& stats, const Tensor& logits,
                           const Tensor& targets, int64_t N, int64_t V, int32_t ignore_index);

// dlogits (N, V) = (softmax(logits) - onehot(targets)) / normalizer on counted rows
// and 0 on ignored rows: the gradient of (loss sum / normalizer). Overwrites, does
// not accumulate. dlogits may alias logits (in place, to save the (N, V) buffer).
// normalizer > 0, normally the count of non-ignored targets over all replicas
// (pass 1 when that count is 0: every row is then ignored and written as 0).
// logits f32; dlogits f32, or bf16 (a separate buffer): the f32 result rounded once.
void cross_entropy_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits,
                            const Tensor& targets, int64_t N, int64_t V, int32_t ignore_index,
                            float normalizer);

// Note [Fused classifier]
// ~~~~~~~~~~~~~~~~~~~~~~~
// In bf16 on CUDA devices the LM head writes its logits in bf16 (fp32 accumulation,
// one rounding at the store, as torch.autocast's linear does) into an (N, ld)
// buffer, ld the vocabulary padded to a multiple of 64 (gemm_plan.h: 16-byte rows
// for the GEMMs and the kernels' vector loads); the loss reads them (in fp32, as
// autocast's cross_entropy does) and backward overwrites them with their gradient
// in bf16, in place, which the head's backward GEMMs read. This is llm.c's fused
// classifier: the f32 path's (N, V) fp32 logits and the bf16 copy of their
// gradient (6 bytes per logit; 2.5 GB on the seed preset at 16 x 512) become one
// bf16 buffer (2 bytes per logit), and the softmax is read once per pass, in
// 16-byte chunks along the vocabulary. Not computing the logits in fp32 chunks
// and recomputing them in backward: that is a third GEMM of the head's size (~9 %
// of the seed preset's step) to keep 8 more bits of the logits that the bf16
// gradient rounds away anyway. The normalizer is known only after the replicas'
// counts are summed, so forward saves each row's lse and backward writes the
// gradient: exp(x - lse) / normalizer, less 1 / normalizer at the target.

// stats (2) = {loss sum, counted rows} as cross_entropy_forward, and lse (N) f32 =
// log sum_v exp(logits[n, v]) (0 on ignored rows), from bf16 logits (N rows of V,
// ld >= V apart). CPU devices run it too (the twin the GPU tests compare with).
void cross_entropy_fused_forward(Stream& stream, const Tensor& stats, const Tensor& lse,
                                 const Tensor& logits, const Tensor& targets, int64_t N, int64_t V,
                                 int64_t ld, int32_t ignore_index);

// logits (N rows of V, ld apart) bf16 become dlogits = (softmax - onehot(targets)) /
// normalizer, rounded once, in place (0 on ignored rows), from lse of the forward.
// Columns [V, ld) are not touched.
void cross_entropy_fused_backward(Stream& stream, const Tensor& logits, const Tensor& lse,
                                  const Tensor& targets, int64_t N, int64_t V, int64_t ld,
                                  int32_t ignore_index, float normalizer);

}  // namespace fanout::ops
