#include "models/llama_arena.h"

#include <algorithm>
#include <tuple>

namespace fanout::models {

LlamaModel::Arena::Arena(const LlamaConfig& c, Device device, DType X, const Shape& shape)
    : capacity(shape.tokens), fused_projections(shape.fused_projections) {
  const int64_t N = shape.tokens, C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Hd = c.num_attention_heads * c.head_dim, KVd = c.num_key_value_heads * c.head_dim;
  const int64_t H = c.num_attention_heads, L = c.num_hidden_layers, QKV = Hd + 2 * KVd;
  const bool fp = shape.fused_projections;
  // Note [Sequence parallelism]: Ns rows of the residual stream per rank, Nf = T
  // x Ns rows where they are gathered (rows past N are zeros).
  const bool sp = shape.sequence;
  const int64_t Ns = sp ? (N + shape.tensor - 1) / shape.tensor : N,
                Nf = sp ? shape.tensor * Ns : N;
  // Two passes: count, then carve.
  int64_t total[2] = {0, 0};  // f32, X
  std::vector<std::tuple<Tensor*, int64_t, int>> plan;
  auto want = [&](Tensor* t, int64_t numel, DType d) {
    int which = d == DType::f32 ? 0 : 1;
    plan.emplace_back(t, numel, which);
    total[which] += (numel + 31) / 32 * 32;  // 64-byte aligned views
  };
  const DType F = DType::f32;
  res.resize(L + 1);
  layers.resize(L);
  for (int64_t l = shape.l0; l <= shape.l1; ++l) want(&res[l], Ns * C, F);
  auto want_layer = [&](Layer& l) {
    want(&l.res_mid, Ns * C, F), want(&l.ln1, Nf * C, X), want(&l.rstd1, Ns, F);
    want(&l.q, N * Hd, X), want(&l.k, N * KVd, X), want(&l.v, N * KVd, X);
    want(&l.att, N * Hd, X), want(&l.lse, N * H, F), want(&l.ln2, Nf * C, X);
    want(&l.rstd2, Ns, F), want(&l.act, N * I, X);
    if (fp)
      want(&l.gu, 2 * N * I, X);
    else
      want(&l.gate, N * I, X), want(&l.up, N * I, X);
  };
  // Note [Recompute]: one set of layer buffers, shared once carved (below).
  const int64_t carved_end = shape.recompute ? std::min(shape.l0 + 1, shape.l1) : shape.l1;
  for (int64_t l = shape.l0; l < carved_end; ++l) want_layer(layers[l]);
  auto want_grads = [&](LayerGrads& g, bool split) {
    if (fp) {
      want(&g.dqkv, N * QKV, X), want(&g.dgu, 2 * N * I, X);
    } else {
      want(&g.dq, N * Hd, X), want(&g.dk, N * KVd, X), want(&g.dv, N * KVd, X);
      want(&g.dgate, N * I, X), want(&g.dup, N * I, X);
    }
    if (split) want(&g.dres_o, N * C, X), want(&g.dres_down, N * C, X);
  };
  if (fp) {
    want(&qkv, N * QKV, X);
    want(&qkv_grads.dq, N * Hd, X), want(&qkv_grads.dk, N * KVd, X);
    want(&qkv_grads.dv, N * KVd, X);
  }
  layer_grads.resize(shape.split ? L : 1);
  if (shape.split)
    for (int64_t l = shape.l0; l < shape.l1; ++l) want_grads(layer_grads[l], true);
  else
    want_grads(layer_grads[0], false);
  if (shape.head) {
    want(&lnf, Nf * C, X), want(&rstdf, Ns, F);
    if (shape.fused)
      want(&logits_x, N * shape.ld, X), want(&lse_head, N, F);
    else
      want(&logits, N * V, F);
    if (X != F && !shape.fused) want(&dlogits_x, N * V, X);
    if (shape.tensor > 1) want(&lse_head, N, F), want(&ce_parts, shape.tensor * N * 3, F);
  }
  want(&tmp_c, Nf * C, F), want(&dres, Ns * C, F), want(&dln, Nf * C, F), want(&datt, N * Hd, F);
  want(&dact, N * I, F);
  if (X != F) want(&dres_x, N * C, X);
  if (sp) want(&dres_full, Nf * C, F);
  if (sp && !shape.head) want(&hidden_full, Nf * C, F);
  storage_f32 = Tensor::empty({total[0]}, F, device, MemTag::activations);
  if (total[1] > 0) storage_x = Tensor::empty({total[1]}, X, device, MemTag::activations);
  int64_t at[2] = {0, 0};
  for (auto& [t, numel, which] : plan) {
    *t = (which == 0 ? storage_f32 : storage_x).view(at[which], {numel});
    at[which] += (numel + 31) / 32 * 32;
  }
  // Note [Fused projections]: fused, gate and up (and their gradients) are the
  // interleaved halves of one buffer's rows, and dq, dk, dv the shared ones.
  gu_ld = fp ? 2 * I : I;
  if (fp) {
    auto gate_up = [&](const Tensor& gu, Tensor& gate, Tensor& up) {
      gate = gu.view(0, {2 * N * I});
      up = tail_view(gu, I);
    };
    for (int64_t l = shape.l0; l < carved_end; ++l)
      gate_up(layers[l].gu, layers[l].gate, layers[l].up);
    for (LayerGrads& g : layer_grads) {
      if (!g.dgu.defined()) continue;  // split: the layers outside the stage
      gate_up(g.dgu, g.dgate, g.dup);
      g.dq = qkv_grads.dq, g.dk = qkv_grads.dk, g.dv = qkv_grads.dv;
    }
  }
  if (shape.recompute)
    for (int64_t l = shape.l0 + 1; l < shape.l1; ++l) layers[l] = layers[shape.l0];
}

}  // namespace fanout::models
