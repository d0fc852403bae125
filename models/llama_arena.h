#pragma once
// LlamaModel's activation arena: every activation backward needs, per layer,
// plus shared backward scratch and the micro-batch it was computed for. Internal
// to models/llama_model*.cpp.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "models/llama_model.h"

namespace fanout::models {

// t from element `offset` to its end (empty past it): where a column block of
// interleaved rows starts (Note [Fused projections]).
inline Tensor tail_view(const Tensor& t, int64_t offset) {
  offset = std::min(offset, t.numel());
  return t.view(offset, {t.numel() - offset});
}

// One allocation per dtype carved into views, sized for `capacity` tokens (B*T)
// of the stage's layers [l0, l1) (and the head when it holds it). X is the
// working dtype (Note [Mixed precision]).
struct LlamaModel::Arena {
  // Fused (Note [Fused projections]), gate and up are views of gu, rows gu_ld apart.
  struct Layer {
    Tensor res_mid, ln1, rstd1, q, k, v, att, lse, ln2, rstd2, gu, gate, up, act;
  };
  // The output gradients the weight GEMMs read: one shared set, or one per layer
  // when the weight gradients wait for backward_weight (Note [Split backward]);
  // dres_o and dres_down (d(residual) as o_proj and down_proj read it) only then.
  // Fused, dgate and dup are views of dgu as gate and up are of gu, dqkv holds
  // dq, dk, dv row by row for the one GEMM, and dq, dk, dv are the shared buffers
  // attention's backward writes (qkv_grads below); unfused, dqkv and dgu are unused.
  struct LayerGrads {
    Tensor dqkv, dq, dk, dv, dgu, dgate, dup, dres_o, dres_down;
  };
  struct Shape {
    int64_t tokens = 0;  // capacity
    int64_t l0 = 0, l1 = 0;
    bool head = true, fused = false, recompute = false, split = false;
    bool fused_projections = false;  // Note [Fused projections]
    int64_t ld = 0;                  // the logits' row stride
    int tensor = 1;                  // tensor-parallel ranks (the loss's per-row parts of each)
    // Note [Sequence parallelism]: the residual stream, its norms' statistics and
    // its gradient hold a rank's rows only; what gathers them holds all ranks'.
    bool sequence = false;
  };
  Arena(const LlamaConfig& c, Device device, DType X, const Shape& shape);

  int64_t capacity = 0;  // tokens (B*T)
  Tensor storage_f32, storage_x;
  std::vector<Tensor> res;  // L + 1 residual streams (those of the stage's layers)
  // The stage's layers; under recompute (Note [Recompute]) they share one set of
  // buffers, which holds the activations of live_layer.
  std::vector<Layer> layers;
  std::vector<LayerGrads> layer_grads;  // one, or one per layer under split
  int64_t live_layer = -1;
  // Note [Fused projections]: the q/k/v GEMM's (N, Hd + 2 KVd) output before RoPE,
  // and attention's dq, dk, dv before they join dqkv (fused only); gate and up's
  // row stride: I apart, or 2 I fused.
  bool fused_projections = false;
  Tensor qkv;
  LayerGrads qkv_grads;
  int64_t gu_ld = 0;
  // The head: f32 logits, or under the fused classifier bf16 logits (N rows ld
  // apart, their gradient in place) and each row's lse.
  Tensor lnf, rstdf, logits, logits_x, lse_head;
  Tensor ce_parts;  // tensor parallelism: every rank's (max, sum, target logit) per row
  // scratch
  Tensor tmp_c, dres, dln, datt, dact;
  // bf16 only: the GEMM-side copies of dres and (unfused) of dlogits
  Tensor dres_x, dlogits_x;
  // Sequence parallelism: every rank's rows of dres, and of the hidden state
  // (the stage's output), gathered.
  Tensor dres_full, hidden_full;
  // The micro-batch these activations belong to, and the logits' gradient the
  // head's weight gradient reads (split backward).
  int64_t B = 0, T = 0;
  Tensor inputs, targets;
  int32_t ignore_index = kIgnoreIndex;
  Tensor dlogits;
  int64_t dlogits_ld = 0;
  LayerGrads& grads_of(int64_t l) {
    return layer_grads.size() == 1 ? layer_grads[0] : layer_grads[l];
  }
};

}  // namespace fanout::models
