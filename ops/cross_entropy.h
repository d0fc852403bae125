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

}  // namespace fanout::ops
