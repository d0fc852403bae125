#include "models/llama_model.h"

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/gemm_plan.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace fanout::models {

// Note [Mixed precision]
// ~~~~~~~~~~~~~~~~~~~~~~
// `--precision bf16` is bf16-mixed as Lightning and llm.c mean it, decided once for
// every device kind:
//   fp32: master weights (params_), gradients (grads_, accumulated and reduced in
//         fp32), AdamW state, the residual stream (res, res_mid, tmp_c, dres), every
//         statistic (RMSNorm's rstd, attention's lse), the logits and the loss, and
//         the input gradients GEMMs accumulate into (dln, datt, dact: several GEMMs
//         add into each).
//   bf16: the working weights (working_, one rounding of the master after each
//         update; what replicas exchange), and the activations that are GEMM
//         inputs or outputs: the normed inputs (ln1, ln2, lnf), q, k, v, the
//         attention output, gate, up and their product, and the output gradients
//         fed to GEMMs (dq, dk, dv, dgate, dup, and bf16 copies of dres and of
//         the logits' gradient).
// Why this split: GEMMs are where bf16 pays (twice the throughput, half the
// bytes) and they accumulate in fp32 inside, so only their inputs are rounded.
// The residual stream is a long running sum over layers, where bf16's 8 bits of
// mantissa would swallow small block outputs; statistics and the softmax need
// the range and precision of fp32; gradients are summed over micro-batches and
// replicas, where rounding would bias the update. Every kernel computes in fp32
// and rounds once at its store (round to nearest even, engine/core/dtype.h).
// One exception, on CUDA devices: the LM head writes its logits in bf16 for the
// fused classifier (Note [Fused classifier], ops/cross_entropy.h), which reads
// them in fp32 as torch.autocast does; set_fused_classifier picks it elsewhere.
// Checkpoints hold the fp32 master weights whatever the precision.

// --- activation arena -------------------------------------------------------

// Every activation backward needs, per layer, plus shared backward scratch: one
// allocation per dtype carved into views, sized for `capacity` rows of B*T tokens.
// X is the working dtype (Note [Mixed precision]).
struct LlamaModel::Arena {
  struct Layer {
    Tensor res_mid, ln1, rstd1, q, k, v, att, lse, ln2, rstd2, gate, up, act;
  };
  int64_t capacity = 0;  // tokens (B*T)
  Tensor storage_f32, storage_x;
  std::vector<Tensor> res;  // L + 1 residual streams
  std::vector<Layer> layers;
  // The head: f32 logits, or under the fused classifier bf16 logits (N rows ld
  // apart, their gradient in place) and each row's lse.
  Tensor lnf, rstdf, logits, logits_x, lse_head;
  // scratch
  Tensor tmp_c, dres, dln, datt, dq, dk, dv, dact, dgate, dup;
  // bf16 only: the GEMM-side copies of dres and (unfused) of dlogits
  Tensor dres_x, dlogits_x;

  Arena(const LlamaConfig& c, Device device, int64_t N, DType X, bool fused, int64_t ld)
      : capacity(N) {
    int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
    int64_t Hd = c.num_attention_heads * c.head_dim, KVd = c.num_key_value_heads * c.head_dim;
    int64_t H = c.num_attention_heads, L = c.num_hidden_layers;
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
    for (auto& r : res) want(&r, N * C, F);
    for (auto& l : layers) {
      want(&l.res_mid, N * C, F), want(&l.ln1, N * C, X), want(&l.rstd1, N, F);
      want(&l.q, N * Hd, X), want(&l.k, N * KVd, X), want(&l.v, N * KVd, X);
      want(&l.att, N * Hd, X), want(&l.lse, N * H, F), want(&l.ln2, N * C, X);
      want(&l.rstd2, N, F), want(&l.gate, N * I, X), want(&l.up, N * I, X);
      want(&l.act, N * I, X);
    }
    want(&lnf, N * C, X), want(&rstdf, N, F);
    if (fused)
      want(&logits_x, N * ld, X), want(&lse_head, N, F);
    else
      want(&logits, N * V, F);
    want(&tmp_c, N * C, F), want(&dres, N * C, F), want(&dln, N * C, F), want(&datt, N * Hd, F);
    want(&dq, N * Hd, X), want(&dk, N * KVd, X), want(&dv, N * KVd, X);
    want(&dact, N * I, F), want(&dgate, N * I, X), want(&dup, N * I, X);
    if (X != F) want(&dres_x, N * C, X);
    if (X != F && !fused) want(&dlogits_x, N * V, X);
    storage_f32 = Tensor::empty({total[0]}, F, device, MemTag::activations);
    if (total[1] > 0) storage_x = Tensor::empty({total[1]}, X, device, MemTag::activations);
    int64_t at[2] = {0, 0};
    for (auto& [t, numel, which] : plan) {
      *t = (which == 0 ? storage_f32 : storage_x).view(at[which], {numel});
      at[which] += (numel + 31) / 32 * 32;
    }
  }
};

// --- construction -----------------------------------------------------------

LlamaModel::LlamaModel(LlamaConfig config, Device device, std::string stream_name, DType working)
    : config_(std::move(config)), layout_(config_), device_(device), working_dtype_(working) {
  config_.validate();
  FANOUT_CHECK(working == DType::f32 || working == DType::bf16,
               "the working dtype must be f32 or bf16, got ", dtype_name(working));
  stream_ = std::make_unique<Stream>(
      device, stream_name.empty() ? device.str() + " compute" : std::move(stream_name));
  ld_ = config_.vocab_size;
  if (working == DType::bf16 && device.is_cuda()) set_fused_classifier(true);
  const int64_t L = config_.num_hidden_layers;
  units_.push_back({layout_.embed(), layout_.embed() + config_.vocab_size * config_.hidden_size});
  for (int64_t l = 0; l < L; ++l) units_.push_back({layout_.layer(l).begin, layout_.layer(l).end});
  units_.push_back({layout_.final_norm(), layout_.total()});
  for (size_t u = 0; u + 1 < units_.size(); ++u)
    FANOUT_ASSERT(units_[u].end == units_[u + 1].begin, "the units do not tile the layout");
  FANOUT_ASSERT(units_.front().begin == 0 && units_.back().end == layout_.total(),
                "the units do not cover the layout");
  unit_weights_.resize(units_.size());
  unit_grads_.resize(units_.size());
  unit_grads_base_.resize(units_.size());
  // Note [The head's gradient in parts]: under zero2/zero3 a gradient range is
  // reduced as soon as backward has produced it, and the next range's buffer
  // waits for that; an untied lm_head and embedding (vocab x hidden each, often
  // the largest tensors) are produced in blocks of rows no larger than a layer
  // (ops::matmul_backward_weight_rows, ops::embedding_backward_rows), so no more
  // than a layer's gradient exists at once. Tied, the lm_head's gradient shares
  // the embedding's buffer, which the embedding's backward adds to at the end:
  // one range.
  const parallel::ParamUnit head = units_.back();
  const int64_t V = config_.vocab_size, C = config_.hidden_size;
  if (config_.tie_word_embeddings) {
    grad_ranges_ = units_;
  } else {
    int64_t layer = 1;
    for (int64_t l = 0; l < L; ++l)
      layer = std::max(layer, units_[l + 1].end - units_[l + 1].begin);
    head_rows_per_part_ = std::clamp<int64_t>(layer / C, 1, V);
    auto parts = [&](int64_t table) {
      for (int64_t r = 0; r < V; r += head_rows_per_part_) {
        int64_t rows = std::min(head_rows_per_part_, V - r);
        grad_ranges_.push_back({table + r * C, table + (r + rows) * C});
      }
    };
    parts(layout_.embed());
    grad_ranges_.insert(grad_ranges_.end(), units_.begin() + 1, units_.end() - 1);
    grad_ranges_.push_back({head.begin, layout_.lm_head()});
    parts(layout_.lm_head());
  }
}

void LlamaModel::set_fused_classifier(bool on) {
  FANOUT_ASSERT(!on || working_dtype_ == DType::bf16, "the fused classifier needs bf16 weights");
  FANOUT_ASSERT(!arena_, "set_fused_classifier after the first forward");
  fused_classifier_ = on;
  ld_ = on ? ops::vocab_padded(config_.vocab_size) : config_.vocab_size;
}

// Note [Lazy flat buffers]: the flat parameters and gradients are allocated at
// their first use, not in the constructor, so that zero2/zero3 (which keep only
// shards, engine/parallel/zero/sharded_storage.h) never allocate what they replace -- under
// --device-memory a model larger than one device must not fail before it is sharded.
void LlamaModel::ensure_params() {
  const int64_t P = layout_.total();
  if (!store_weights_ && !params_.defined()) {
    params_ = Tensor::empty({P}, DType::f32, device_, MemTag::params);
    flat_fill(*stream_, params_, 0.0f);
    working_ = params_;
    if (working_dtype_ != DType::f32) {
      working_ = Tensor::empty({P}, working_dtype_, device_, MemTag::params);
      params_to_working(0, P);
    }
  }
}

// The flat gradients, at the first backward or zero_grads (never for a model that
// only runs forward: eval, generate).
void LlamaModel::ensure_grads() {
  if (store_ != nullptr || grads_.defined()) return;
  grads_ = Tensor::empty({layout_.total()}, DType::f32, device_, MemTag::grads);
  flat_fill(*stream_, grads_, 0.0f);
}

void LlamaModel::set_unit_store(parallel::UnitStore* store, bool weights) {
  FANOUT_ASSERT(store != nullptr && store_ == nullptr, "set_unit_store: once, with a store");
  FANOUT_ASSERT(!params_.defined() && !grads_.defined(),
                "set_unit_store after the flat buffers were allocated");
  store_ = store;
  store_weights_ = weights;
}

Tensor LlamaModel::params() {
  FANOUT_ASSERT(!store_weights_, "params() of a model whose weights are sharded (zero3)");
  ensure_params();
  return params_;
}

Tensor LlamaModel::grads() {
  FANOUT_ASSERT(store_ == nullptr, "grads() of a model whose gradients are sharded");
  ensure_grads();
  return grads_;
}

Tensor LlamaModel::working_params() {
  FANOUT_ASSERT(!store_weights_, "working_params() of a model whose weights are sharded (zero3)");
  ensure_params();
  return working_;
}

int LlamaModel::unit_of(int64_t offset) const {
  auto it = std::upper_bound(units_.begin(), units_.end(), offset,
                             [](int64_t o, const parallel::ParamUnit& u) { return o < u.begin; });
  return static_cast<int>(it - units_.begin()) - 1;
}

Tensor LlamaModel::w(int64_t offset, Shape shape) const {
  if (!store_weights_) return working_.view(offset, std::move(shape));
  int u = unit_of(offset);
  FANOUT_ASSERT(unit_weights_[u].defined(), "unit ", u, "'s weights used without acquiring them");
  return unit_weights_[u].view(offset - units_[u].begin, std::move(shape));
}

Tensor LlamaModel::g(int64_t offset, Shape shape) const {
  if (store_ == nullptr) return grads_.view(offset, std::move(shape));
  int u = unit_of(offset);
  FANOUT_ASSERT(unit_grads_[u].defined(), "unit ", u, "'s gradients used without acquiring them");
  const int64_t at = offset - unit_grads_base_[u];
  FANOUT_ASSERT(at >= 0 && at + shape_numel(shape) <= unit_grads_[u].numel(), "gradient at ",
                offset, " is outside the acquired range");
  return unit_grads_[u].view(at, std::move(shape));
}

void LlamaModel::acquire_weights(int unit, int next) {
  if (!store_weights_) return;
  unit_weights_[unit] = store_->acquire_weights(unit, next);
}

void LlamaModel::release_weights(int unit) {
  if (!store_weights_) return;
  unit_weights_[unit] = Tensor();
  store_->release_weights(unit);
}

void LlamaModel::acquire_grads(int unit, int64_t begin, int64_t end) {
  if (store_ == nullptr) return;
  unit_grads_[unit] = store_->acquire_grads(unit, begin, end);
  unit_grads_base_[unit] = begin;
}

void LlamaModel::release_grads(int unit, int64_t begin, int64_t end) {
  if (store_ != nullptr) {
    FANOUT_ASSERT(grad_ready_, "sharded gradients without a grad-ready callback");
    unit_grads_[unit] = Tensor();
  }
  if (grad_ready_) grad_ready_(begin, end);
}

void LlamaModel::params_to_working(int64_t begin, int64_t end) {
  if (working_dtype_ == DType::f32 || end <= begin) return;
  FANOUT_ASSERT(!store_weights_, "params_to_working of a model whose weights are sharded");
  ensure_params();
  ops::cast_f32_to_bf16(*stream_, working_.view(begin, {end - begin}),
                        params_.view(begin, {end - begin}), end - begin);
}

LlamaModel::~LlamaModel() {
  try {
    stream_->synchronize();
  } catch (...) {
  }
}

std::vector<float> LlamaModel::random_params(const LlamaConfig& config, uint64_t seed) {
  LlamaLayout layout(config);
  std::vector<float> host(static_cast<size_t>(layout.total()));
  const auto& params = layout.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    float* dst = host.data() + p.offset;
    if (p.shape.size() == 1) {
      std::fill(dst, dst + p.numel, 1.0f);  // RMSNorm weights
      continue;
    }
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + i);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (int64_t j = 0; j < p.numel; ++j) dst[j] = normal(rng);
  }
  return host;
}

void LlamaModel::init_random(uint64_t seed) {
  std::vector<float> host = random_params(config_, seed);
  tensor_upload(*stream_, params(), host.data());
  params_to_working(0, layout_.total());
}

Tensor LlamaModel::param(const std::string& name) {
  FANOUT_CHECK(!store_weights_, "param(): the weights are sharded (zero3)");
  ensure_params();
  const ParamInfo* p = layout_.find(name);
  FANOUT_CHECK(p != nullptr, "no parameter named ", name);
  return w(p->offset, p->shape);
}

Tensor LlamaModel::grad(const std::string& name) {
  FANOUT_CHECK(store_ == nullptr, "grad(): the gradients are sharded (zero2/zero3)");
  ensure_grads();
  const ParamInfo* p = layout_.find(name);
  FANOUT_CHECK(p != nullptr, "no parameter named ", name);
  return g(p->offset, p->shape);
}

void LlamaModel::zero_grads() {
  if (store_ != nullptr) return;  // the store's shards are the engine's to clear
  ensure_grads();
  flat_fill(*stream_, grads_, 0.0f);
}

void LlamaModel::reserve(int64_t rows, int64_t seq_len) {
  FANOUT_CHECK(seq_len <= config_.max_position_embeddings, "sequence length ", seq_len,
               " exceeds max_position_embeddings ", config_.max_position_embeddings);
  int64_t N = rows * seq_len;
  if (arena_ && arena_->capacity >= N) return;
  stream_->synchronize();  // the old arena may still be in use by queued work
  arena_.reset();
  arena_ = std::make_unique<Arena>(config_, device_, N, working_dtype_, fused_classifier_, ld_);
}

// --- forward ----------------------------------------------------------------

void LlamaModel::forward_hidden(const Tensor& inputs, int64_t B, int64_t T) {
  FANOUT_ASSERT(inputs.dtype() == DType::i32 && inputs.numel() == B * T, "inputs ", inputs.str());
  ensure_params();
  reserve(B, T);
  B_ = B, T_ = T;
  inputs_ = inputs;
  const LlamaConfig& c = config_;
  Stream& s = *stream_;
  Arena& a = *arena_;
  int64_t N = B * T, C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
  int64_t Hd = H * D, KVd = KV * D;
  float eps = static_cast<float>(c.rms_norm_eps);
  StreamSpan span(s, "forward");
  // out = residual + inp W^T (W (C, K)): one GEMM whose epilogue adds the residual
  // on CUDA devices (cuBLASLt's C != D); on CPU devices the product and the add,
  // as before (the fold saves nothing there).
  auto project_add = [&](const Tensor& out, const Tensor& residual, const Tensor& inp,
                         const Tensor& weight, int64_t K) {
    if (device_.is_cuda())
      return ops::matmul_forward_residual(s, out, residual, inp, weight, N, K, C);
    ops::matmul_forward(s, a.tmp_c, inp, weight, N, K, C);
    ops::residual_forward(s, out, residual, a.tmp_c, N * C);
  };

  const int head = head_unit();
  const bool tied = config_.tie_word_embeddings;
  if (head_held_) {  // a forward that no backward followed (evaluation)
    release_weights(head);
    if (tied) release_weights(0);
    head_held_ = false;
  }
  acquire_weights(0, 1);
  ops::embedding_forward(s, a.res[0], inputs, w(layout_.embed(), {V, C}), N, C, V);
  release_weights(0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerOffsets& o = layout_.layer(l);
    Arena::Layer& x = a.layers[l];
    const int unit = static_cast<int>(l) + 1;
    acquire_weights(unit, unit + 1);
    // attention block: res_mid = res + o_proj(attention(rope(q), rope(k), v))
    ops::rmsnorm_forward(s, x.ln1, x.rstd1, a.res[l], w(o.ln1, {C}), N, C, eps);
    ops::matmul_forward(s, x.q, x.ln1, w(o.q, {Hd, C}), N, C, Hd);
    ops::matmul_forward(s, x.k, x.ln1, w(o.k, {KVd, C}), N, C, KVd);
    ops::matmul_forward(s, x.v, x.ln1, w(o.v, {KVd, C}), N, C, KVd);
    ops::rope_forward(s, x.q, x.q, B, T, H, D, c.rope(), 0);
    ops::rope_forward(s, x.k, x.k, B, T, KV, D, c.rope(), 0);
    ops::attention_forward(s, x.att, x.lse, x.q, x.k, x.v, B, T, T, H, KV, D);
    project_add(x.res_mid, a.res[l], x.att, w(o.o, {C, Hd}), Hd);
    // MLP block: res' = res_mid + down(silu(gate(x)) * up(x))
    ops::rmsnorm_forward(s, x.ln2, x.rstd2, x.res_mid, w(o.ln2, {C}), N, C, eps);
    ops::matmul_forward(s, x.gate, x.ln2, w(o.gate, {I, C}), N, C, I);
    ops::matmul_forward(s, x.up, x.ln2, w(o.up, {I, C}), N, C, I);
    ops::swiglu_forward(s, x.act, x.gate, x.up, N * I);
    project_add(a.res[l + 1], x.res_mid, x.act, w(o.down, {C, I}), I);
    release_weights(unit);
  }
  int64_t L = c.num_hidden_layers;
  // The head's weights stay for the backward that follows (released there).
  acquire_weights(head, tied ? 0 : -1);
  if (tied) acquire_weights(0, -1);
  head_held_ = true;
  ops::rmsnorm_forward(s, a.lnf, a.rstdf, a.res[L], w(layout_.final_norm(), {C}), N, C, eps);
}

void LlamaModel::forward_head(bool fused) {
  const int64_t N = B_ * T_, C = config_.hidden_size, V = config_.vocab_size;
  Arena& a = *arena_;
  if (fused) {
    ops::matmul_forward(*stream_, a.logits_x, a.lnf, w(layout_.lm_head(), {V, C}), N, C, V, ld_);
    return;
  }
  if (!fused_classifier_) {
    ops::matmul_forward(*stream_, a.logits, a.lnf, w(layout_.lm_head(), {V, C}), N, C, V);
    return;
  }
  // forward_logits under the fused classifier: the same bf16 logits (rows V apart),
  // widened into an f32 buffer made on demand, so that a loss computed from them
  // (--loss-on output) is the fused loss.
  if (!logits_f32_.defined() || logits_f32_.numel() < N * V)
    logits_f32_ = Tensor::empty({a.capacity * V}, DType::f32, device_, MemTag::activations);
  ops::matmul_forward(*stream_, a.logits_x, a.lnf, w(layout_.lm_head(), {V, C}), N, C, V, V);
  ops::cast_bf16_to_f32(*stream_, logits_f32_.view(0, {N * V}), a.logits_x.view(0, {N * V}), N * V);
}

Tensor LlamaModel::forward_logits(const Tensor& inputs) {
  FANOUT_ASSERT(inputs.dim() == 2, "inputs must be (B, T), got ", inputs.str());
  int64_t B = inputs.size(0), T = inputs.size(1);
  forward_hidden(inputs, B, T);
  forward_head(false);
  Tensor logits = fused_classifier_ ? logits_f32_ : arena_->logits;
  return logits.view(0, {B, T, config_.vocab_size});
}

void LlamaModel::forward_loss(const Tensor& inputs, const Tensor& targets, const Tensor& stats,
                              int32_t ignore_index) {
  FANOUT_ASSERT(inputs.dim() == 2 && targets.numel() == inputs.numel(), "inputs ", inputs.str(),
                " targets ", targets.str());
  int64_t B = inputs.size(0), T = inputs.size(1);
  forward_hidden(inputs, B, T);
  forward_head(fused_classifier_);
  targets_ = targets;
  ignore_index_ = ignore_index;
  StreamSpan span(*stream_, "loss");
  if (fused_classifier_)
    return ops::cross_entropy_fused_forward(*stream_, stats, arena_->lse_head, arena_->logits_x,
                                            targets, B * T, config_.vocab_size, ld_, ignore_index);
  ops::cross_entropy_forward(*stream_, stats, arena_->logits, targets, B * T, config_.vocab_size,
                             ignore_index);
}

// The same token cross-entropy as forward_loss, on logits gathered from every
// replica (faithful dp): one loss, owned by the model, whoever holds the logits.
void LlamaModel::logits_loss(Stream& stream, const Tensor& logits, const Tensor& targets,
                             const Tensor& stats, int32_t ignore_index) {
  const int64_t V = logits.size(logits.dim() - 1), N = logits.numel() / V;
  ops::cross_entropy_forward(stream, stats, logits, targets, N, V, ignore_index);
}

void LlamaModel::logits_loss_backward(Stream& stream, const Tensor& logits, const Tensor& targets,
                                      int32_t ignore_index, float normalizer) {
  const int64_t V = logits.size(logits.dim() - 1), N = logits.numel() / V;
  ops::cross_entropy_backward(stream, logits, logits, targets, N, V, ignore_index, normalizer);
}

// --- backward ---------------------------------------------------------------

void LlamaModel::backward_from_loss(float normalizer) {
  FANOUT_ASSERT(targets_.defined(), "backward_from_loss without forward_loss");
  int64_t N = B_ * T_, V = config_.vocab_size;
  if (fused_classifier_) {  // Note [Fused classifier]: the bf16 logits become their gradient
    ops::cross_entropy_fused_backward(*stream_, arena_->logits_x, arena_->lse_head, targets_, N, V,
                                      ld_, ignore_index_, normalizer);
    backward_hidden(arena_->logits_x, ld_);
    targets_ = Tensor();
    return;
  }
  // fp32: dlogits overwrite the logits in place (the [N, V] buffer is the
  // largest); bf16: they are written once, rounded, where the lm_head GEMM reads.
  Tensor dlogits = working_dtype_ == DType::f32 ? arena_->logits : arena_->dlogits_x;
  ops::cross_entropy_backward(*stream_, dlogits, arena_->logits, targets_, N, V, ignore_index_,
                              normalizer);
  backward_hidden(dlogits, V);
  targets_ = Tensor();
}

void LlamaModel::backward_from_logits(const Tensor& dlogits) {
  const int64_t V = config_.vocab_size, n = B_ * T_ * V;
  FANOUT_ASSERT(dlogits.numel() == n && dlogits.dtype() == DType::f32, "dlogits ", dlogits.str());
  if (working_dtype_ == DType::f32) return backward_hidden(dlogits, V);
  // bf16: rounded once where the lm_head GEMM reads them, rows V apart (the fused
  // classifier's buffer holds N * ld >= N * V elements).
  Tensor x = fused_classifier_ ? arena_->logits_x : arena_->dlogits_x;
  ops::cast_f32_to_bf16(*stream_, x.view(0, {n}), dlogits.view(0, {n}), n);
  backward_hidden(x, V);
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

void LlamaModel::backward_hidden(const Tensor& dlogits, int64_t ld) {
  const LlamaConfig& c = config_;
  Stream& s = *stream_;
  Arena& a = *arena_;
  int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, I = c.intermediate_size;
  int64_t V = c.vocab_size, H = c.num_attention_heads, KV = c.num_key_value_heads;
  int64_t D = c.head_dim, Hd = H * D, KVd = KV * D, L = c.num_hidden_layers;
  ensure_grads();
  StreamSpan span(s, "backward");
  // Scratch that gradients accumulate into is cleared for this batch's size only.
  auto zero = [&](const Tensor& t, int64_t n) { flat_fill(s, t.view(0, {n}), 0.0f); };
  // d(residual) as the o_proj and down_proj GEMMs read it: itself in fp32, a
  // rounded copy in bf16.
  auto dres_for_gemm = [&]() {
    if (working_dtype_ == DType::f32) return a.dres;
    ops::cast_f32_to_bf16(s, a.dres_x.view(0, {N * C}), a.dres.view(0, {N * C}), N * C);
    return a.dres_x;
  };

  const int head = head_unit();
  const bool tied = config_.tie_word_embeddings;
  if (!head_held_) {
    acquire_weights(head, -1);
    if (tied) acquire_weights(0, -1);
  }
  head_held_ = false;
  // lm_head and the final norm
  zero(a.dln, N * C);
  if (store_ != nullptr && !tied) {
    // Note [The head's gradient in parts]: d(lnf) first, then the lm_head's
    // gradient block by block from the top, each reduced as soon as it is done.
    ops::matmul_backward(s, a.dln, Tensor(), dlogits, a.lnf, w(layout_.lm_head(), {V, C}), N, C, V,
                         ld);
    table_grad_in_parts(head, layout_.lm_head(), [&](const Tensor& dw, int64_t row0, int64_t rows) {
      ops::matmul_backward_weight_rows(s, dw, dlogits, a.lnf, N, C, V, row0, rows, ld);
    });
    acquire_grads(head, units_[head].begin, layout_.lm_head());
    zero(a.dres, N * C);
    ops::rmsnorm_backward(s, a.dres, g(layout_.final_norm(), {C}), a.dln, a.res[L],
                          w(layout_.final_norm(), {C}), a.rstdf, N, C);
    release_weights(head);
    release_grads(head, units_[head].begin, layout_.lm_head());
  } else {
    acquire_grads(head);
    if (tied) acquire_grads(0);  // the lm_head's gradient, until the embedding adds its own
    ops::matmul_backward(s, a.dln, g(layout_.lm_head(), {V, C}), dlogits, a.lnf,
                         w(layout_.lm_head(), {V, C}), N, C, V, ld);
    zero(a.dres, N * C);
    ops::rmsnorm_backward(s, a.dres, g(layout_.final_norm(), {C}), a.dln, a.res[L],
                          w(layout_.final_norm(), {C}), a.rstdf, N, C);
    release_weights(head);
    if (tied) release_weights(0);
    release_grads(head);
  }

  for (int64_t l = L - 1; l >= 0; --l) {
    const LayerOffsets& o = layout_.layer(l);
    Arena::Layer& x = a.layers[l];
    const int unit = static_cast<int>(l) + 1;
    acquire_weights(unit, unit > 1 ? unit - 1 : -1);
    acquire_grads(unit);
    // MLP block; dres holds d(res[l+1]) and becomes d(res_mid).
    zero(a.dact, N * I);
    ops::matmul_backward(s, a.dact, g(o.down, {C, I}), dres_for_gemm(), x.act, w(o.down, {C, I}), N,
                         I, C);
    ops::swiglu_backward(s, a.dgate, a.dup, a.dact, x.gate, x.up, N * I);
    zero(a.dln, N * C);
    ops::matmul_backward(s, a.dln, g(o.gate, {I, C}), a.dgate, x.ln2, w(o.gate, {I, C}), N, C, I);
    ops::matmul_backward(s, a.dln, g(o.up, {I, C}), a.dup, x.ln2, w(o.up, {I, C}), N, C, I);
    ops::rmsnorm_backward(s, a.dres, g(o.ln2, {C}), a.dln, x.res_mid, w(o.ln2, {C}), x.rstd2, N, C);
    // attention block; dres becomes d(res[l]).
    zero(a.datt, N * Hd);
    ops::matmul_backward(s, a.datt, g(o.o, {C, Hd}), dres_for_gemm(), x.att, w(o.o, {C, Hd}), N, Hd,
                         C);
    ops::attention_backward(s, a.dq, a.dk, a.dv, a.datt, x.q, x.k, x.v, x.att, x.lse, B, T, H, KV,
                            D);
    ops::rope_backward(s, a.dq, a.dq, B, T, H, D, c.rope(), 0);
    ops::rope_backward(s, a.dk, a.dk, B, T, KV, D, c.rope(), 0);
    zero(a.dln, N * C);
    ops::matmul_backward(s, a.dln, g(o.q, {Hd, C}), a.dq, x.ln1, w(o.q, {Hd, C}), N, C, Hd);
    ops::matmul_backward(s, a.dln, g(o.k, {KVd, C}), a.dk, x.ln1, w(o.k, {KVd, C}), N, C, KVd);
    ops::matmul_backward(s, a.dln, g(o.v, {KVd, C}), a.dv, x.ln1, w(o.v, {KVd, C}), N, C, KVd);
    ops::rmsnorm_backward(s, a.dres, g(o.ln1, {C}), a.dln, a.res[l], w(o.ln1, {C}), x.rstd1, N, C);
    release_weights(unit);
    release_grads(unit);
  }
  if (store_ != nullptr && !tied) {
    // Note [The head's gradient in parts], for the embedding: blocks of rows from the top.
    table_grad_in_parts(0, layout_.embed(), [&](const Tensor& dw, int64_t row0, int64_t rows) {
      ops::embedding_backward_rows(s, dw, a.dres, inputs_, N, C, V, row0, rows);
    });
    return;
  }
  if (!tied) acquire_grads(0);
  ops::embedding_backward(s, g(layout_.embed(), {V, C}), a.dres, inputs_, N, C, V);
  release_grads(0);
}

}  // namespace fanout::models
