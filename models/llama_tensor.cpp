#include "models/llama_tensor.h"

#include <algorithm>

#include "engine/core/check.h"
#include "models/llama_layout.h"

namespace fanout::models {

// Note [Tensor parallelism]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Megatron-LM's split of a Llama block over T devices of one group, each shard
// a LlamaModel of tensor_shard_config (so every op, arena and stage works on it
// unchanged) that sums with its peers at four points per layer:
//   q/k/v, gate/up   column-parallel: rank t holds a block of their rows (whole
//                    heads, whole key-value groups: GQA's query heads of group g
//                    sit with g), reads the whole normed input, and writes its
//                    own heads / hidden units: no communication forward; in
//                    backward the input gradients of the rank's rows are partial
//                    sums over the hidden dimension, summed over the group before
//                    the RMSNorm backward (Megatron's f: identity forward,
//                    all-reduce backward).
//   o_proj, down     row-parallel: rank t holds the columns that read its heads /
//                    units, so its product is a partial sum of the output, summed
//                    over the group before the residual stream goes on (g:
//                    all-reduce forward, identity backward). Rank 0 adds the
//                    residual into its partial sum, the others do not: the sum is
//                    the residual plus the whole product.
//   embedding        vocabulary-parallel: rank t holds rows [t * Vr, (t+1) * Vr),
//                    looks up the tokens that fall there (zeros elsewhere), and
//                    the group sums the rows (exactly one rank contributed each).
//   lm_head + loss   vocabulary-parallel: rank t computes the logits of its rows
//                    only; the loss combines each row's max, sum of exponentials
//                    and target logit over the group (ops/cross_entropy_parallel.h),
//                    and backward sums the input gradient of the head as for
//                    q/k/v. No device holds (tokens, vocabulary) logits.
// The norms' weights are whole on every rank and see the same inputs and
// gradients on every rank (every sum above leaves bit-identical values
// everywhere), so their gradients and updates agree without communication; the
// gradient norm counts them once (FlatPiece::shared). The vocabulary is padded
// to a multiple of T; the padding rows stay zero (no token reads them, the loss
// skips their logits, so their gradients are zero).

// Note [Sequence parallelism]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Without it every rank of a group holds the whole residual stream, runs the
// norms on every token and keeps their activations: work and memory that tensor
// parallelism does not divide. With --sequence-parallel (Korthikanti et al.'s,
// as Megatron-LM has it) rank t holds rows [t * Ns, (t + 1) * Ns) of the
// (tokens, hidden) residual stream, Ns = ceil(tokens / T) (rows past the tokens
// are zeros): the norms run on those rows, and each all-reduce becomes the pair
// it is made of --
//   before q/k/v and gate/up  all-gather the normed rows (backward: reduce-scatter
//                             the input gradient onto each row's owner)
//   after o_proj and down     reduce-scatter the partial sums onto each row's owner,
//                             which adds its residual rows (backward: all-gather
//                             the residual gradient the GEMMs read)
//   embedding                 reduce-scatter the looked-up rows
// -- moving the same bytes. The norm weights' gradients on each rank cover its
// rows only (FlatPiece::partial): the engine sums them over the group after the
// step, so every rank updates the same whole values. A pipeline stage's output
// and input gradient cross to the next stage whole (gathered), so stages with
// and without it, and the pipeline's buffers, do not change.

void check_tensor_parallel(const LlamaConfig& c, int T) {
  FANOUT_CHECK(T >= 1, "--tp must be at least 1, got ", T);
  auto divides = [&](int64_t n, const char* what) {
    FANOUT_CHECK(n % T == 0, "--tp ", T, " does not divide ", what, " (", n,
                 "): each device holds an equal share of them");
  };
  divides(c.num_attention_heads, "num_attention_heads");
  divides(c.num_key_value_heads, "num_key_value_heads");
  divides(c.intermediate_size, "intermediate_size");
}

int64_t tensor_vocab_rows(const LlamaConfig& c, int T) {
  return (c.vocab_size + T - 1) / T;
}

LlamaConfig tensor_shard_config(const LlamaConfig& whole, int T) {
  check_tensor_parallel(whole, T);
  LlamaConfig c = whole;
  c.num_attention_heads /= T;
  c.num_key_value_heads /= T;
  c.intermediate_size /= T;
  c.vocab_size = tensor_vocab_rows(whole, T);
  c.bos_token_id = c.eos_token_id = c.pad_token_id = -1;
  return c;
}

std::vector<parallel::FlatPiece> tensor_shard_pieces(const LlamaConfig& whole, int T, int rank) {
  FANOUT_ASSERT(0 <= rank && rank < T, "tensor rank ", rank, " of ", T);
  const LlamaConfig part = tensor_shard_config(whole, T);
  const LlamaLayout wl(whole), pl(part);
  const int64_t C = whole.hidden_size, D = whole.head_dim;
  std::vector<parallel::FlatPiece> out;
  auto piece = [&](int64_t local, int64_t w, int64_t n, bool shared = false) {
    if (n > 0) out.push_back({local, w, n, shared});
  };
  // Rows [rank * rows, ...) of a (rows x T, cols) table, cut at `limit` rows.
  auto rows = [&](int64_t local, int64_t w, int64_t n_rows, int64_t cols, int64_t limit) {
    const int64_t r0 = rank * n_rows, r1 = std::min(r0 + n_rows, limit);
    piece(local, w + r0 * cols, std::max<int64_t>(r1 - r0, 0) * cols);
  };
  // Columns [rank * n_cols, ...) of a (C, n_cols x T) table: one piece per row.
  auto columns = [&](int64_t local, int64_t w, int64_t n_cols) {
    for (int64_t r = 0; r < C; ++r)
      piece(local + r * n_cols, w + r * n_cols * T + rank * n_cols, n_cols);
  };
  const int64_t Vr = part.vocab_size, V = whole.vocab_size;
  rows(pl.embed(), wl.embed(), Vr, C, V);
  for (int64_t l = 0; l < whole.num_hidden_layers; ++l) {
    const LayerOffsets& a = pl.layer(l);
    const LayerOffsets& b = wl.layer(l);
    const int64_t Hd = part.num_attention_heads * D, KVd = part.num_key_value_heads * D;
    const int64_t I = part.intermediate_size;
    piece(a.ln1, b.ln1, C, true);
    rows(a.q, b.q, Hd, C, Hd * T);
    rows(a.k, b.k, KVd, C, KVd * T);
    rows(a.v, b.v, KVd, C, KVd * T);
    columns(a.o, b.o, Hd);
    piece(a.ln2, b.ln2, C, true);
    rows(a.gate, b.gate, I, C, I * T);
    rows(a.up, b.up, I, C, I * T);
    columns(a.down, b.down, I);
  }
  piece(pl.final_norm(), wl.final_norm(), C, true);
  if (!whole.tie_word_embeddings) rows(pl.lm_head(), wl.lm_head(), Vr, C, V);
  // In the shard layout's order.
  std::sort(out.begin(), out.end(), [](const parallel::FlatPiece& x, const parallel::FlatPiece& y) {
    return x.local < y.local;
  });
  return out;
}

}  // namespace fanout::models
