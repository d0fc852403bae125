// LlamaModel's backward, op by op: from the loss or the logits' gradient (or,
// on a pipeline stage, from the next stage's input gradient) down to the
// embedding, gradients accumulating in f32 (Note [Mixed precision]).

#include <algorithm>
#include <utility>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "models/llama_arena.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/cross_entropy_parallel.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace fanout::models {

// Note [Split backward]
// ~~~~~~~~~~~~~~~~~~~~~
// Zero-bubble pipeline schedules run a micro-batch's backward in two passes: the
// input gradient first (what the previous stage waits for), the weight gradients
// later, where the stage would otherwise idle. Every GEMM's backward is already
// two products (ops::matmul_backward: dinp, dweight); split, the first pass
// computes the dinp halves, the norms' weight gradients (computed with their
// input gradient, and small) and keeps each weight GEMM's output gradient in the
// slot (Arena::LayerGrads per layer, the head's dlogits); backward_weight then
// runs the dweight halves from those and the activations the forward kept, and
// the embedding's gradient from the last d(residual). Gradients accumulate in the
// same order as unsplit, per micro-batch.

// Note [Recompute]
// ~~~~~~~~~~~~~~~~
// Activation checkpointing per layer: forward keeps every layer's input (the
// residual stream res[l]) but computes each layer's activations into one set of
// buffers that all layers share; backward computes layer l's forward again from
// res[l] just before its backward (backward_weight too, under split). The same
// kernels on the same inputs: the results are bit-identical to keeping every
// activation. The last layer forward computed is still there and not recomputed.

std::pair<Tensor, int64_t> LlamaModel::loss_backward(float normalizer) {
  Arena& a = *arena_;
  FANOUT_ASSERT(a.targets.defined(), "a loss backward without its forward");
  const int64_t N = a.B * a.T, V = config_.vocab_size;
  if (tensor_parallel()) {  // Note [Tensor parallelism]: this rank's columns, from the whole lse
    Tensor dlogits = working_dtype_ == DType::f32 ? a.logits : a.dlogits_x;
    ops::cross_entropy_shard_backward(*stream_, dlogits, a.logits, a.lse_head, a.targets, N, vrows_,
                                      V, v0_, a.ignore_index, normalizer);
    a.targets = Tensor();
    return {dlogits, V};
  }
  if (fused_classifier_) {  // Note [Fused classifier]: the bf16 logits become their gradient
    ops::cross_entropy_fused_backward(*stream_, a.logits_x, a.lse_head, a.targets, N, V, ld_,
                                      a.ignore_index, normalizer);
    a.targets = Tensor();
    return {a.logits_x, ld_};
  }
  // fp32: dlogits overwrite the logits in place (the [N, V] buffer is the
  // largest); bf16: they are written once, rounded, where the lm_head GEMM reads.
  Tensor dlogits = working_dtype_ == DType::f32 ? a.logits : a.dlogits_x;
  ops::cross_entropy_backward(*stream_, dlogits, a.logits, a.targets, N, V, a.ignore_index,
                              normalizer);
  a.targets = Tensor();
  return {dlogits, V};
}

void LlamaModel::backward_from_loss(float normalizer) {
  FANOUT_ASSERT(arena_ != nullptr, "backward_from_loss without forward_loss");
  auto [dlogits, ld] = loss_backward(normalizer);
  backward_hidden(dlogits, ld);
}

void LlamaModel::backward_from_logits(const Tensor& dlogits) {
  const int64_t V = config_.vocab_size, n = arena_->B * arena_->T * V;
  FANOUT_ASSERT(dlogits.numel() == n && dlogits.dtype() == DType::f32, "dlogits ", dlogits.str());
  if (working_dtype_ == DType::f32) return backward_hidden(dlogits, V);
  // bf16: rounded once where the lm_head GEMM reads them, rows V apart (the fused
  // classifier's buffer holds N * ld >= N * V elements).
  Tensor x = fused_classifier_ ? arena_->logits_x : arena_->dlogits_x;
  ops::cast_f32_to_bf16(*stream_, x.view(0, {n}), dlogits.view(0, {n}), n);
  backward_hidden(x, V);
}

void LlamaModel::stage_backward(const Tensor& dout, float normalizer, bool split) {
  FANOUT_ASSERT(!split || split_backward_, "a split backward in slots reserved without it");
  if (has_head()) {
    auto [dlogits, ld] = loss_backward(normalizer);
    return backward_hidden(dlogits, ld, split);
  }
  const int64_t n = arena_->B * arena_->T * config_.hidden_size;
  FANOUT_ASSERT(dout.dtype() == DType::f32 && dout.numel() >= n, "dout ", dout.str());
  take_rows(arena_->dres, dout, arena_->B * arena_->T);
  backward_hidden(Tensor(), 0, split);
}

void LlamaModel::table_grad_in_parts(
    int unit, int64_t table, const std::function<void(const Tensor&, int64_t, int64_t)>& fn) {
  const int64_t V = config_.vocab_size, C = config_.hidden_size, per = head_rows_per_part_;
  for (int64_t row0 = (V - 1) / per * per; row0 >= 0; row0 -= per) {
    const int64_t rows = std::min(per, V - row0);
    const int64_t b = table + row0 * C, e = b + rows * C;
    acquire_grads(unit, b, e);
    fn(g(b, {rows, C}), row0, rows);
    release_grads(unit, b, e);
  }
}

// From dlogits (the head's stage) or from d(res[l1_]) in the arena's dres.
void LlamaModel::backward_hidden(const Tensor& dlogits, int64_t ld, bool split) {
  FANOUT_ASSERT(!split || store_ == nullptr, "a split backward under a unit store");
  ensure_grads();
  StreamSpan span(*stream_, split ? "backward input" : "backward");
  if (has_head()) backward_head(dlogits, ld, split);
  for (int64_t l = l1_ - 1; l >= l0_; --l) backward_layer(l, split);
  if (has_embedding() && !split) backward_embedding();
  if (!has_embedding() && sequence()) gather_dres();  // the stage's input gradient, whole
}

void LlamaModel::gather_dres() {
  Arena& a = *arena_;
  const int64_t N = a.B * a.T, C = config_.hidden_size, Nr = seq_rows(N);
  tensor_copy(*stream_, a.dres_full.view(seq_offset(N) * C, {Nr * C}), a.dres.view(0, {Nr * C}));
  tensor_gather(a.dres_full, Nr * C);
}

void LlamaModel::backward_head(const Tensor& dlogits, int64_t ld, bool split) {
  Stream& s = *stream_;
  Arena& a = *arena_;
  const int64_t N = a.B * a.T, C = config_.hidden_size, V = config_.vocab_size;
  const int64_t L = config_.num_hidden_layers;
  auto zero = [&](const Tensor& t, int64_t n) { flat_fill(s, t.view(0, {n}), 0.0f); };
  const int head = head_unit();
  const bool tied = config_.tie_word_embeddings;
  if (!head_held_) {
    acquire_weights(head, -1);
    if (tied) acquire_weights(0, -1);
  }
  head_held_ = false;
  const int64_t Nr = seq_rows(N), r0 = seq_offset(N), Nf = sequence() ? tp_.size * Nr : N;
  // d(lnf): the head's GEMM overwrites rows [0, N); the rest (sequence
  // parallelism's padding) stays zero for the scatter-sum.
  if (Nf > N) flat_fill(s, a.dln.view(N * C, {(Nf - N) * C}), 0.0f);
  const ops::Dinp first = ops::Dinp::overwrite;
  auto final_norm = [&] {
    // Note [Tensor parallelism]: the partial sums of the head's vocabulary rows;
    // Note [Sequence parallelism]: each rank's rows summed onto it.
    if (sequence())
      tensor_scatter_sum(a.dln, Nr * C);
    else
      tensor_sum(a.dln, N * C);
    zero(a.dres, Nr * C);
    ops::rmsnorm_backward(s, a.dres, g(layout_.final_norm(), {C}), a.dln.view(r0 * C, {Nr * C}),
                          a.res[L], w(layout_.final_norm(), {C}), a.rstdf, Nr, C);
  };
  if (split) {  // Note [Split backward]: the lm_head's weight gradient waits
    ops::matmul_backward(s, a.dln, Tensor(), dlogits, a.lnf, w(layout_.lm_head(), {V, C}), N, C, V,
                         ld, first);
    a.dlogits = dlogits, a.dlogits_ld = ld;
    return final_norm();
  }
  if (store_ != nullptr && !tied) {
    // Note [The head's gradient in parts]: d(lnf) first, then the lm_head's
    // gradient block by block from the top, each reduced as soon as it is done.
    ops::matmul_backward(s, a.dln, Tensor(), dlogits, a.lnf, w(layout_.lm_head(), {V, C}), N, C, V,
                         ld, first);
    table_grad_in_parts(head, layout_.lm_head(), [&](const Tensor& dw, int64_t row0, int64_t rows) {
      ops::matmul_backward_weight_rows(s, dw, dlogits, a.lnf, N, C, V, row0, rows, ld);
    });
    acquire_grads(head, units_[head].begin, layout_.lm_head());
    final_norm();
    release_weights(head);
    release_grads(head, units_[head].begin, layout_.lm_head());
    return;
  }
  acquire_grads(head);
  // Tied: the lm_head's gradient goes into the embedding's, until the embedding
  // adds its own; on a stage without the embedding, into tied_g_.
  if (tied && has_embedding()) acquire_grads(0);
  ops::matmul_backward(s, a.dln, g(layout_.lm_head(), {V, C}), dlogits, a.lnf,
                       w(layout_.lm_head(), {V, C}), N, C, V, ld, first);
  final_norm();
  release_weights(head);
  if (tied) release_weights(0);
  release_grads(head);
}

// dres holds d(res[l+1]) and becomes d(res[l]).
void LlamaModel::backward_layer(int64_t l, bool split) {
  const LlamaConfig& c = config_;
  Stream& s = *stream_;
  Arena& a = *arena_;
  const int64_t B = a.B, T = a.T, N = B * T, C = c.hidden_size, I = c.intermediate_size;
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
  const int64_t Hd = H * D, KVd = KV * D;
  // d(residual) as the o_proj and down_proj GEMMs read it: itself in fp32, a
  // rounded copy in bf16; split, a copy kept for backward_weight.
  // Note [Sequence parallelism]: gathered from every rank's rows first.
  const int64_t Nr = seq_rows(N), r0 = seq_offset(N), Nf = sequence() ? tp_.size * Nr : N;
  auto dres_for_gemm = [&](const Tensor& kept) {
    if (sequence()) gather_dres();
    const Tensor src = sequence() ? a.dres_full : a.dres;
    if (!split && working_dtype_ == DType::f32) return src;
    const Tensor& dst = split ? kept : a.dres_x;
    if (dst.dtype() == DType::f32)
      tensor_copy(s, dst.view(0, {N * C}), src.view(0, {N * C}));
    else
      ops::cast_f32_to_bf16(s, dst.view(0, {N * C}), src.view(0, {N * C}), N * C);
    return dst;
  };
  // The column-parallel GEMMs' input gradient: partial sums over this rank's
  // heads or units (Note [Tensor parallelism]), summed -- onto each row's owner
  // under sequence parallelism -- then the norm's backward on the rows held.
  auto norm_backward = [&](const Tensor& dweight, const Tensor& inp, const Tensor& weight,
                           const Tensor& rstd) {
    if (sequence())
      tensor_scatter_sum(a.dln, Nr * C);
    else
      tensor_sum(a.dln, N * C);
    ops::rmsnorm_backward(s, a.dres, dweight, a.dln.view(r0 * C, {Nr * C}), inp, weight, rstd, Nr,
                          C);
  };
  const LayerOffsets& o = layout_.layer(l);
  Arena::Layer& x = a.layers[l];
  Arena::LayerGrads& d = a.grads_of(l);
  const int unit = static_cast<int>(l) + 1;
  acquire_weights(unit, unit > 1 ? unit - 1 : -1);
  if (recompute_ && a.live_layer != l) forward_layer(l, false);  // Note [Recompute]
  acquire_grads(unit);
  auto dw = [&](int64_t offset, Shape shape) { return split ? Tensor() : g(offset, shape); };
  // MLP block; dres holds d(res[l+1]) and becomes d(res_mid).
  // The first GEMM into each input gradient overwrites it (no zero fill); the
  // rows of d(ln) past N (sequence parallelism's padding) stay zero for the scatter-sum.
  const ops::Dinp first = ops::Dinp::overwrite;
  auto dln_padding = [&] {
    if (Nf > N) flat_fill(s, a.dln.view(N * C, {(Nf - N) * C}), 0.0f);
  };
  ops::matmul_backward(s, a.dact, dw(o.down, {C, I}), dres_for_gemm(d.dres_down), x.act,
                       w(o.down, {C, I}), N, I, C, 0, first);
  ops::swiglu_backward_rows(s, d.dgate, d.dup, a.dact, x.gate, x.up, N, I, a.gu_ld);
  dln_padding();
  if (a.fused_projections) {  // Note [Fused projections]
    ops::matmul_backward(s, a.dln, dw(o.gate, {2 * I, C}), d.dgu, x.ln2, w(o.gate, {2 * I, C}), N,
                         C, 2 * I, 0, first);
  } else {
    ops::matmul_backward(s, a.dln, dw(o.gate, {I, C}), d.dgate, x.ln2, w(o.gate, {I, C}), N, C, I,
                         0, first);
    ops::matmul_backward(s, a.dln, dw(o.up, {I, C}), d.dup, x.ln2, w(o.up, {I, C}), N, C, I);
  }
  norm_backward(g(o.ln2, {C}), x.res_mid, w(o.ln2, {C}), x.rstd2);
  // attention block; dres becomes d(res[l]).
  ops::matmul_backward(s, a.datt, dw(o.o, {C, Hd}), dres_for_gemm(d.dres_o), x.att, w(o.o, {C, Hd}),
                       N, Hd, C, 0, first);
  ops::attention_backward(s, d.dq, d.dk, d.dv, a.datt, x.q, x.k, x.v, x.att, x.lse, B, T, H, KV, D);
  dln_padding();
  if (a.fused_projections) {
    const int64_t QKV = Hd + 2 * KVd;
    ops::rope_backward(s, d.dqkv, d.dq, B, T, H, D, c.rope(), 0, QKV, Hd);
    ops::rope_backward(s, tail_view(d.dqkv, Hd), d.dk, B, T, KV, D, c.rope(), 0, QKV, KVd);
    tensor_copy_rows(s, tail_view(d.dqkv, Hd + KVd), QKV, d.dv, KVd, N, KVd);
    ops::matmul_backward(s, a.dln, dw(o.q, {QKV, C}), d.dqkv, x.ln1, w(o.q, {QKV, C}), N, C, QKV, 0,
                         first);
  } else {
    ops::rope_backward(s, d.dq, d.dq, B, T, H, D, c.rope(), 0);
    ops::rope_backward(s, d.dk, d.dk, B, T, KV, D, c.rope(), 0);
    ops::matmul_backward(s, a.dln, dw(o.q, {Hd, C}), d.dq, x.ln1, w(o.q, {Hd, C}), N, C, Hd, 0,
                         first);
    ops::matmul_backward(s, a.dln, dw(o.k, {KVd, C}), d.dk, x.ln1, w(o.k, {KVd, C}), N, C, KVd);
    ops::matmul_backward(s, a.dln, dw(o.v, {KVd, C}), d.dv, x.ln1, w(o.v, {KVd, C}), N, C, KVd);
  }
  norm_backward(g(o.ln1, {C}), a.res[l], w(o.ln1, {C}), x.rstd1);
  release_weights(unit);
  release_grads(unit);
}

void LlamaModel::backward_embedding() {
  Stream& s = *stream_;
  Arena& a = *arena_;
  const int64_t N = a.B * a.T, C = config_.hidden_size, V = config_.vocab_size;
  const bool tied = config_.tie_word_embeddings;
  if (store_ != nullptr && !tied) {
    // Note [The head's gradient in parts], for the embedding: blocks of rows from the top.
    table_grad_in_parts(0, layout_.embed(), [&](const Tensor& dw, int64_t row0, int64_t rows) {
      ops::embedding_backward_rows(s, dw, a.dres, a.inputs, N, C, V, row0, rows);
    });
    return;
  }
  if (!tied || !has_head()) acquire_grads(0);  // tied with the head: acquired there
  embedding_grad();
  release_grads(0);
}

// Note [Split backward]: the weight gradients of the slot's micro-batch, in the
// order the unsplit backward accumulates them.
void LlamaModel::backward_weight() {
  FANOUT_ASSERT(split_backward_, "backward_weight in slots reserved without a split backward");
  const LlamaConfig& c = config_;
  Stream& s = *stream_;
  Arena& a = *arena_;
  const int64_t N = a.B * a.T, C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Hd = c.num_attention_heads * c.head_dim;
  const int64_t KVd = c.num_key_value_heads * c.head_dim;
  StreamSpan span(s, "backward weight");
  if (has_head()) {
    ops::matmul_backward(s, Tensor(), g(layout_.lm_head(), {V, C}), a.dlogits, a.lnf,
                         w(layout_.lm_head(), {V, C}), N, C, V, a.dlogits_ld);
    a.dlogits = Tensor();
  }
  for (int64_t l = l1_ - 1; l >= l0_; --l) {
    if (recompute_ && a.live_layer != l) forward_layer(l);  // Note [Recompute]
    const LayerOffsets& o = layout_.layer(l);
    const Arena::Layer& x = a.layers[l];
    const Arena::LayerGrads& d = a.grads_of(l);
    ops::matmul_backward(s, Tensor(), g(o.down, {C, I}), d.dres_down, x.act, w(o.down, {C, I}), N,
                         I, C);
    const int64_t QKV = Hd + 2 * KVd;
    if (a.fused_projections) {  // Note [Fused projections]
      ops::matmul_backward(s, Tensor(), g(o.gate, {2 * I, C}), d.dgu, x.ln2, w(o.gate, {2 * I, C}),
                           N, C, 2 * I);
    } else {
      ops::matmul_backward(s, Tensor(), g(o.gate, {I, C}), d.dgate, x.ln2, w(o.gate, {I, C}), N, C,
                           I);
      ops::matmul_backward(s, Tensor(), g(o.up, {I, C}), d.dup, x.ln2, w(o.up, {I, C}), N, C, I);
    }
    ops::matmul_backward(s, Tensor(), g(o.o, {C, Hd}), d.dres_o, x.att, w(o.o, {C, Hd}), N, Hd, C);
    if (a.fused_projections) {
      ops::matmul_backward(s, Tensor(), g(o.q, {QKV, C}), d.dqkv, x.ln1, w(o.q, {QKV, C}), N, C,
                           QKV);
    } else {
      ops::matmul_backward(s, Tensor(), g(o.q, {Hd, C}), d.dq, x.ln1, w(o.q, {Hd, C}), N, C, Hd);
      ops::matmul_backward(s, Tensor(), g(o.k, {KVd, C}), d.dk, x.ln1, w(o.k, {KVd, C}), N, C, KVd);
      ops::matmul_backward(s, Tensor(), g(o.v, {KVd, C}), d.dv, x.ln1, w(o.v, {KVd, C}), N, C, KVd);
    }
  }
  if (has_embedding()) embedding_grad();
}

// The embedding's gradient from d(res[0]): a tensor-parallel rank scatters the
// tokens of its own rows (Note [Tensor parallelism]).
void LlamaModel::embedding_grad() {
  Arena& a = *arena_;
  const int64_t N = a.B * a.T, C = config_.hidden_size, V = config_.vocab_size;
  if (!tensor_parallel())
    return ops::embedding_backward(*stream_, g(layout_.embed(), {V, C}), a.dres, a.inputs, N, C, V);
  if (sequence()) gather_dres();  // Note [Sequence parallelism]: every token's row
  const Tensor dres = sequence() ? a.dres_full : a.dres;
  if (vrows_ > 0)
    ops::embedding_backward_rows(*stream_, g(layout_.embed(), {vrows_, C}), dres, a.inputs, N, C,
                                 vocab_, v0_, vrows_);
}

}  // namespace fanout::models
