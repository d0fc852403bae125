#pragma once
// Cross-entropy over a vocabulary split across S tensor-parallel shards (the LM
// head's rows divided by vocabulary id): each shard reduces its own columns to
// three floats a row, the parts are all-gathered, and every shard combines them
// into the loss and the row's log-sum-exp. Same stats as ops/cross_entropy.h.
// Shapes: N rows (B*T); shard s holds vocabulary ids [v0, v0 + cols) of V.

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

// Note [Vocabulary-parallel cross-entropy]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Megatron's vocab-parallel cross-entropy. With the LM head split by vocabulary
// rows, shard s computes the logits of ids [v0, v0 + cols) only, so no device
// holds the (N, V) logits. The loss needs lse = log sum_v exp(x_v) over the whole
// vocabulary, which decomposes over the shards: with m_s a shard's row max and
// z_s = sum over its columns of exp(x - m_s),
//     lse = M + log sum_s z_s exp(m_s - M),   M = max_s m_s,
// and the target's logit lies on exactly one shard (the others report 0). So each
// shard writes {m_s, z_s, its target logit} per row (12 N bytes, against 4 N V / S
// for its logits), the S parts are all-gathered shard-major, and every shard
// combines them in the same fixed order into the same stats and lse: no further
// collective, and the same bits on every shard. (Megatron all-reduces the max,
// then the sums: two collectives.) A shard with no columns reports {-inf, 0, 0}
// and drops out of the sum. Backward needs no communication: given lse, a shard's
// gradient columns are exp(x - lse) / normalizer, less 1 / normalizer at the
// target if the shard holds it. The vocabulary is padded to S equal shard widths
// ld >= cols: the padding columns [cols, ld) are never read and get a 0 gradient,
// so the head's padding rows stay as they are.

// part (N*3) f32 = per row {max over the row's cols logits (-inf when cols == 0),
// sum of exp(x - max) over them (0 when cols == 0), logit of targets[n] when
// v0 <= targets[n] < v0 + cols else 0}, from logits f32 (N rows of cols, ld
// apart; column j is vocabulary id v0 + j). An ignored row writes {0, 0, 0} (and
// combine skips it). Any other target outside [0, V) throws fanout::Error (at
// stream.synchronize(), as it is found in the kernel); every shard checks.
void cross_entropy_shard_forward(Stream& stream, const Tensor& part, const Tensor& logits,
                                 const Tensor& targets, int64_t N, int64_t cols, int64_t ld,
                                 int64_t v0, int64_t V, int32_t ignore_index);

// stats (2) = {loss sum, counted rows} as cross_entropy_forward defines them, and
// lse (N) f32 (0 on ignored rows), from the S shards' parts (S*N*3) f32, shard s's
// at offset s*N*3: loss_n = lse_n - sum_s target logit_s, summed in double in row
// order. Deterministic; identical on every shard given the same parts.
void cross_entropy_shard_combine(Stream& stream, const Tensor& stats, const Tensor& lse,
                                 const Tensor& parts, const Tensor& targets, int64_t N, int64_t S,
                                 int32_t ignore_index);

// dlogits (N rows of ld) = (exp(logits - lse[n]) - [v0 + j == targets[n]]) /
// normalizer for columns j < cols, 0 for columns [cols, ld), and 0 on ignored
// rows. Overwrites. logits f32 (N rows of cols, ld apart); dlogits f32 (may alias
// logits: in place) or bf16 (a separate buffer: the f32 result rounded once).
// normalizer > 0, as for cross_entropy_backward. The targets are checked against
// V by cross_entropy_shard_forward; here a negative target that is not
// ignore_index throws fanout::Error at synchronize.
void cross_entropy_shard_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits,
                                  const Tensor& lse, const Tensor& targets, int64_t N, int64_t cols,
                                  int64_t ld, int64_t v0, int32_t ignore_index, float normalizer);

}  // namespace fanout::ops
