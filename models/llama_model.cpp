#include "models/llama_model.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/parallel/tensor/tensor_peers.h"
#include "models/llama_arena.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/cross_entropy_parallel.h"
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

// Note [Fused projections]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// q_proj, k_proj and v_proj are consecutive in the layout (HF's order), so their
// weights are one (Hd + 2 KVd, C) matrix, and so are gate_proj and up_proj (2 I,
// C); their gradients too. Fused, each group is one GEMM forward, one for the
// input gradient and one for the weight gradient, instead of three (two): fewer
// launches, and k and v (KVd columns, a quarter of q under GQA) no longer run as
// GEMMs too narrow to fill a GPU. The price is the layout of the outputs: row n
// of the fused q/k/v output is [q_n | k_n | v_n], while attention reads q, k and
// v whole, so RoPE reads q and k from those rows (ld Hd + 2 KVd) into the saved
// q and k, v is copied out (cudaMemcpy2DAsync), and backward writes dq, dk
// (rotated back) and dv into the rows of dqkv. gate and up stay interleaved:
// SwiGLU reads and its backward writes rows 2 I apart. The extra traffic is the
// v copy each way (N KVd elements); the extra memory one (N, Hd + 2 KVd) buffer
// each way, shared by the layers. Checkpoints keep HF's separate tensors, which
// are the same bytes. The values are those of the separate GEMMs up to the order
// of their fp32 sums (a GEMM's blocking may depend on its width).
// Off by default: on CPU devices, where oneDNN runs a narrow GEMM at the rate of
// a wide one, fusing measured 2-4 % slower on the tiny preset (the copies cost
// more than the launches saved); on GPUs, where k and v's narrow GEMMs leave most
// of the card idle, it is to be measured (tools/gpu/check.sh times both).

namespace {
std::atomic<bool> g_fused_projections{false};
}  // namespace

void set_fused_projections_default(bool on) {
  g_fused_projections = on;
}

bool fused_projections_default() {
  return g_fused_projections;
}

// --- construction -----------------------------------------------------------

LlamaModel::LlamaModel(LlamaConfig config, Device device, std::string stream_name, DType working,
                       TensorShard tensor)
    : whole_config_(std::move(config)),
      tp_(tensor),
      config_(tp_.size > 1 ? tensor_shard_config(whole_config_, tp_.size) : whole_config_),
      layout_(config_),
      device_(device),
      working_dtype_(working),
      fused_projections_(fused_projections_default()) {
  whole_config_.validate();
  config_.validate();
  FANOUT_ASSERT(tp_.size == 1 || (tp_.peers != nullptr && 0 <= tp_.rank && tp_.rank < tp_.size),
                "tensor shard ", tp_.rank, " of ", tp_.size);
  vocab_ = whole_config_.vocab_size;
  v0_ = std::min(vocab_, tp_.rank * config_.vocab_size);
  vrows_ = std::min(vocab_ - v0_, config_.vocab_size);
  FANOUT_CHECK(working == DType::f32 || working == DType::bf16,
               "the working dtype must be f32 or bf16, got ", dtype_name(working));
  stream_ = std::make_unique<Stream>(
      device, stream_name.empty() ? device.str() + " compute" : std::move(stream_name));
  ld_ = config_.vocab_size;
  if (working == DType::bf16 && device.is_cuda() && !tensor_parallel()) set_fused_classifier(true);
  const int64_t L = config_.num_hidden_layers;
  units_.push_back({layout_.embed(), layout_.embed() + config_.vocab_size * config_.hidden_size});
  for (int64_t l = 0; l < L; ++l) units_.push_back({layout_.layer(l).begin, layout_.layer(l).end});
  units_.push_back({layout_.final_norm(), layout_.total()});
  for (size_t u = 0; u + 1 < units_.size(); ++u)
    FANOUT_ASSERT(units_[u].end == units_[u + 1].begin, "the units do not tile the layout");
  FANOUT_ASSERT(units_.front().begin == 0 && units_.back().end == layout_.total(),
                "the units do not cover the layout");
  last_unit_ = static_cast<int>(units_.size());
  l1_ = L;
  top_ = layout_.total();
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

void LlamaModel::set_fused_projections(bool on) {
  FANOUT_ASSERT(!arena_, "set_fused_projections after the first forward");
  fused_projections_ = on;
  ++version_;
}

void LlamaModel::set_fused_classifier(bool on) {
  FANOUT_ASSERT(!on || working_dtype_ == DType::bf16, "the fused classifier needs bf16 weights");
  FANOUT_ASSERT(!on || !tensor_parallel(), "the fused classifier of a tensor-parallel shard");
  FANOUT_ASSERT(!arena_, "set_fused_classifier after the first forward");
  fused_classifier_ = on;
  ld_ = on ? ops::vocab_padded(config_.vocab_size) : config_.vocab_size;
  ++version_;
}

// Note [Pipeline stages]
// ~~~~~~~~~~~~~~~~~~~~~~
// A stage holds units [first_unit, last_unit) of units() -- the embedding, a run
// of decoder layers, the final norm with the lm_head -- and only their piece of
// the flat layout, [base_, top_): weights, gradients and activations of the rest
// are never allocated. Its forward starts from tokens (with the embedding) or from
// the hidden state the previous stage left, and ends at the loss (with the head)
// or at its own hidden state; backward the other way round, leaving d(hidden) for
// the previous stage. Offsets stay those of the whole layout. A tied lm_head on a
// stage without the embedding reads a copy of it (tied_w_) and writes its own
// gradient (tied_g_): one logical weight, which the engine keeps whole (copied
// after each update, gradients summed before it).
void LlamaModel::set_stage(int first_unit, int last_unit) {
  const int U = static_cast<int>(units_.size());
  FANOUT_ASSERT(0 <= first_unit && first_unit < last_unit && last_unit <= U, "stage units [",
                first_unit, ", ", last_unit, ") of ", U);
  FANOUT_ASSERT(store_ == nullptr && !params_.defined() && !grads_.defined() && arenas_.empty(),
                "set_stage after the buffers were allocated");
  const int64_t L = config_.num_hidden_layers;
  first_unit_ = first_unit, last_unit_ = last_unit;
  l0_ = std::max(first_unit, 1) - 1;
  l1_ = std::min<int64_t>(last_unit, L + 1) - 1;
  base_ = units_[first_unit].begin;
  top_ = units_[last_unit - 1].end;
  ++version_;
}

void LlamaModel::set_recompute(bool on) {
  FANOUT_ASSERT(arenas_.empty(), "set_recompute after the first forward");
  recompute_ = on;
  ++version_;
}

// Note [Lazy flat buffers]: the flat parameters and gradients are allocated at
// their first use, not in the constructor, so that zero2/zero3 (which keep only
// shards, engine/parallel/zero/sharded_storage.h) never allocate what they replace -- under
// --device-memory a model larger than one device must not fail before it is sharded.
void LlamaModel::ensure_params() {
  const int64_t P = top_ - base_;
  if (!store_weights_ && !params_.defined()) {
    ++version_;
    params_ = Tensor::empty({P}, DType::f32, device_, MemTag::params);
    flat_fill(*stream_, params_, 0.0f);
    working_ = params_;
    if (working_dtype_ != DType::f32) {
      working_ = Tensor::empty({P}, working_dtype_, device_, MemTag::params);
      params_to_working(base_, top_);
    }
    if (config_.tie_word_embeddings && !has_embedding() && has_head()) {
      tied_w_ =
          Tensor::empty({units_[0].end - units_[0].begin}, working_dtype_, device_, MemTag::params);
      // Zeros until the engine copies the embedding in (any dtype: zero bits).
      tensor_upload(*stream_, tied_w_, std::vector<char>(tied_w_.nbytes(), 0).data());
    }
  }
}

// The flat gradients, at the first backward or zero_grads (never for a model that
// only runs forward: eval, generate).
// Under a unit store (a pipeline stage's zero2) a tied lm_head's gradient stays
// here, whole: the engine adds it to the embedding's shards.
void LlamaModel::ensure_grads() {
  if (store_ == nullptr && !grads_.defined()) {
    ++version_;
    grads_ = Tensor::empty({top_ - base_}, DType::f32, device_, MemTag::grads);
    flat_fill(*stream_, grads_, 0.0f);
  }
  if (config_.tie_word_embeddings && !has_embedding() && has_head() && !tied_g_.defined()) {
    ++version_;
    tied_g_ = Tensor::empty({units_[0].end - units_[0].begin}, DType::f32, device_, MemTag::grads);
    flat_fill(*stream_, tied_g_, 0.0f);
  }
}

void LlamaModel::set_unit_store(parallel::UnitStore* store, bool weights) {
  FANOUT_ASSERT(store != nullptr && store_ == nullptr, "set_unit_store: once, with a store");
  FANOUT_ASSERT(!params_.defined() && !grads_.defined(),
                "set_unit_store after the flat buffers were allocated");
  FANOUT_ASSERT(whole() || !weights, "sharded weights (zero3) for a pipeline stage");
  store_ = store;
  store_weights_ = weights;
  ++version_;
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
  if (offset < base_ || offset >= top_) {
    FANOUT_ASSERT(tied_w_.defined() && offset < units_[0].end, "weights at ", offset,
                  " are not on this stage");
    return tied_w_.view(offset - units_[0].begin, std::move(shape));
  }
  if (!store_weights_) return working_.view(offset - base_, std::move(shape));
  int u = unit_of(offset);
  FANOUT_ASSERT(unit_weights_[u].defined(), "unit ", u, "'s weights used without acquiring them");
  return unit_weights_[u].view(offset - units_[u].begin, std::move(shape));
}

Tensor LlamaModel::g(int64_t offset, Shape shape) const {
  if (offset < base_ || offset >= top_) {
    FANOUT_ASSERT(tied_g_.defined() && offset < units_[0].end, "gradients at ", offset,
                  " are not on this stage");
    return tied_g_.view(offset - units_[0].begin, std::move(shape));
  }
  if (store_ == nullptr) return grads_.view(offset - base_, std::move(shape));
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
  FANOUT_ASSERT(base_ <= begin && end <= top_, "params_to_working outside the stage");
  ops::cast_f32_to_bf16(*stream_, working_.view(begin - base_, {end - begin}),
                        params_.view(begin - base_, {end - begin}), end - begin);
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

// A stage takes its own range (a tied lm_head's copy is the engine's to refresh);
// a tensor-parallel shard its pieces of the whole model's values.
void LlamaModel::init_random(uint64_t seed) {
  std::vector<float> whole = random_params(whole_config_, seed);
  std::vector<float> host(static_cast<size_t>(top_ - base_), 0.0f);
  for (const parallel::FlatPiece& p : pieces())
    std::copy(whole.data() + p.whole, whole.data() + p.whole + p.count,
              host.data() + (p.local - base_));
  tensor_upload(*stream_, params(), host.data());
  params_to_working(base_, top_);
}

std::vector<parallel::FlatPiece> LlamaModel::pieces() const {
  if (!tensor_parallel()) return {{base_, base_, top_ - base_, false}};
  std::vector<parallel::FlatPiece> out;
  for (parallel::FlatPiece p : tensor_shard_pieces(whole_config_, tp_.size, tp_.rank)) {
    const int64_t lo = std::max(p.local, base_), hi = std::min(p.local + p.count, top_);
    if (lo >= hi) continue;
    // Note [Sequence parallelism]: each rank's norm gradients cover its rows only.
    out.push_back({lo, p.whole + (lo - p.local), hi - lo, p.shared, p.shared && sequence()});
  }
  return out;
}

void LlamaModel::tensor_gather(const Tensor& full, int64_t part) {
  StreamSpan span(*stream_, "tp all-gather");
  tp_.peers->all_gather(tp_.rank, full, *stream_, part);
}

void LlamaModel::tensor_scatter_sum(const Tensor& full, int64_t part) {
  StreamSpan span(*stream_, "tp reduce-scatter");
  tp_.peers->reduce_scatter(tp_.rank, full, *stream_, part);
}

void LlamaModel::tensor_sum(const Tensor& buf, int64_t n) {
  if (!tensor_parallel()) return;
  StreamSpan span(*stream_, "tp all-reduce");
  tp_.peers->all_reduce(tp_.rank, buf, *stream_, n);
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
  ensure_grads();
  if (store_ == nullptr) flat_fill(*stream_, grads_, 0.0f);  // else the store's to clear
  if (tied_g_.defined()) flat_fill(*stream_, tied_g_, 0.0f);
}

void LlamaModel::reserve(int64_t rows, int64_t seq_len) {
  FANOUT_CHECK(seq_len <= config_.max_position_embeddings, "sequence length ", seq_len,
               " exceeds max_position_embeddings ", config_.max_position_embeddings);
  int64_t N = rows * seq_len;
  if (arena_ && arena_->capacity >= N) return;
  FANOUT_ASSERT(arenas_.size() <= 1, "reserve() after reserve_slots()");
  stream_->synchronize();  // the old arena may still be in use by queued work
  ++version_;
  arenas_.clear();
  arenas_.push_back(make_arena(N));
  arena_ = arenas_[0].get();
}

std::unique_ptr<LlamaModel::Arena> LlamaModel::make_arena(int64_t tokens) const {
  Arena::Shape shape;
  shape.tokens = tokens, shape.l0 = l0_, shape.l1 = l1_, shape.head = has_head();
  shape.fused = fused_classifier_, shape.recompute = recompute_, shape.split = split_backward_;
  shape.fused_projections = fused_projections_;
  shape.ld = ld_;
  shape.tensor = tp_.size;
  shape.sequence = sequence();
  return std::make_unique<Arena>(config_, device_, working_dtype_, shape);
}

void LlamaModel::reserve_slots(int slots, int64_t rows, int64_t seq_len, bool split_backward) {
  FANOUT_CHECK(seq_len <= config_.max_position_embeddings, "sequence length ", seq_len,
               " exceeds max_position_embeddings ", config_.max_position_embeddings);
  FANOUT_ASSERT(slots >= 1, "reserve_slots: ", slots, " slots");
  const int64_t N = rows * seq_len;
  if (static_cast<int>(arenas_.size()) == slots && split_backward == split_backward_ &&
      arena_->capacity >= N)
    return;
  stream_->synchronize();
  ++version_;
  arenas_.clear();
  split_backward_ = split_backward;
  for (int i = 0; i < slots; ++i) arenas_.push_back(make_arena(N));
  arena_ = arenas_[0].get();
}

void LlamaModel::use_slot(int slot) {
  FANOUT_ASSERT(0 <= slot && slot < static_cast<int>(arenas_.size()), "slot ", slot, " of ",
                arenas_.size());
  if (arena_ != arenas_[slot].get()) ++version_;
  arena_ = arenas_[slot].get();
}

// --- forward ----------------------------------------------------------------

namespace {

// out = residual + inp W^T (W (C, K)): one GEMM whose epilogue adds the residual
// on CUDA devices (cuBLASLt's C != D); on CPU devices the product and the add,
// as before (the fold saves nothing there).
void project_add(Stream& s, const Tensor& tmp, const Tensor& out, const Tensor& residual,
                 const Tensor& inp, const Tensor& weight, int64_t N, int64_t K, int64_t C) {
  if (s.device().is_cuda())
    return ops::matmul_forward_residual(s, out, residual, inp, weight, N, K, C);
  ops::matmul_forward(s, tmp, inp, weight, N, K, C);
  ops::residual_forward(s, out, residual, tmp, N * C);
}

}  // namespace

void LlamaModel::forward_hidden(const Tensor& inputs, int64_t B, int64_t T) {
  const LlamaConfig& c = config_;
  const int64_t N = B * T, C = c.hidden_size, V = c.vocab_size;
  ensure_params();
  if (arenas_.size() <= 1) reserve(B, T);
  FANOUT_ASSERT(arena_->capacity >= N, "a batch of ", N, " tokens in a slot of ", arena_->capacity);
  Stream& s = *stream_;
  Arena& a = *arena_;
  a.B = B, a.T = T, a.inputs = inputs, a.live_layer = -1;
  StreamSpan span(s, "forward");
  const int head = head_unit();
  const bool tied = config_.tie_word_embeddings;
  if (head_held_) {  // a forward that no backward followed (evaluation)
    release_weights(head);
    if (tied) release_weights(0);
    head_held_ = false;
  }
  if (has_embedding()) {
    FANOUT_ASSERT(inputs.dtype() == DType::i32 && inputs.numel() == N, "inputs ", inputs.str());
    acquire_weights(0, 1);
    if (tensor_parallel()) {  // Note [Tensor parallelism]: each rank its rows, then the sum
      const Tensor out = sequence() ? a.tmp_c : a.res[0];
      if (vrows_ > 0)
        ops::embedding_forward_rows(s, out, inputs, w(layout_.embed(), {vrows_, C}), N, C, vocab_,
                                    v0_, vrows_);
      else
        flat_fill(s, out.view(0, {N * C}), 0.0f);
      if (sequence()) {  // Note [Sequence parallelism]: summed onto the rows' owners
        const int64_t Nr = seq_rows(N), full = tp_.size * Nr * C;
        if (full > N * C) flat_fill(s, out.view(N * C, {full - N * C}), 0.0f);
        tensor_scatter_sum(out, Nr * C);
        tensor_copy(s, a.res[0].view(0, {Nr * C}), out.view(seq_offset(N) * C, {Nr * C}));
      } else {
        tensor_sum(a.res[0], N * C);
      }
    } else {
      ops::embedding_forward(s, a.res[0], inputs, w(layout_.embed(), {V, C}), N, C, V);
    }
    release_weights(0);
  } else {
    FANOUT_ASSERT(inputs.dtype() == DType::f32 && inputs.numel() >= N * C, "hidden ", inputs.str());
    take_rows(a.res[l0_], inputs, N);
  }
  for (int64_t l = l0_; l < l1_; ++l) forward_layer(l);
  if (!has_head()) {
    if (sequence()) {  // the stage's output whole, for the next stage
      const int64_t Nr = seq_rows(N);
      tensor_copy(s, a.hidden_full.view(seq_offset(N) * C, {Nr * C}), a.res[l1_].view(0, {Nr * C}));
      tensor_gather(a.hidden_full, Nr * C);
    }
    return;
  }
  // The head's weights stay for the backward that follows (released there).
  acquire_weights(head, tied ? 0 : -1);
  if (tied) acquire_weights(0, -1);
  head_held_ = true;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t Nr = seq_rows(N);
  ops::rmsnorm_forward(s, a.lnf.view(seq_offset(N) * C, {Nr * C}), a.rstdf,
                       a.res[c.num_hidden_layers], w(layout_.final_norm(), {C}), Nr, C, eps);
  if (sequence()) tensor_gather(a.lnf, Nr * C);
}

// Whole (N, C) rows -> the rows this rank holds (all of them without sequence
// parallelism; rows past N zero).
void LlamaModel::take_rows(const Tensor& mine, const Tensor& whole, int64_t N) {
  const int64_t C = config_.hidden_size, Nr = seq_rows(N), r0 = seq_offset(N);
  const int64_t valid = std::clamp<int64_t>(N - r0, 0, Nr);
  if (valid < Nr) flat_fill(*stream_, mine.view(valid * C, {(Nr - valid) * C}), 0.0f);
  if (valid > 0) tensor_copy(*stream_, mine.view(0, {valid * C}), whole.view(r0 * C, {valid * C}));
}

// Layer l from res[l] to res[l + 1], keeping what its backward reads (under
// recompute, in the buffers every layer shares). acquire: bracket the use of the
// unit's weights (a recompute inside backward runs within backward's own).
void LlamaModel::forward_layer(int64_t l, bool acquire) {
  const LlamaConfig& c = config_;
  Stream& s = *stream_;
  Arena& a = *arena_;
  const int64_t B = a.B, T = a.T, N = B * T, C = c.hidden_size, I = c.intermediate_size;
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
  const int64_t Hd = H * D, KVd = KV * D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const LayerOffsets& o = layout_.layer(l);
  Arena::Layer& x = a.layers[l];
  const int unit = static_cast<int>(l) + 1;
  if (acquire) acquire_weights(unit, unit + 1);
  // Note [Tensor parallelism]: the row-parallel projections' partial sums, rank
  // 0's with the residual, summed over the group.
  const int64_t Nr = seq_rows(N), r0 = seq_offset(N);
  auto project = [&](const Tensor& out, const Tensor& residual, const Tensor& inp,
                     const Tensor& weight, int64_t K) {
    if (sequence()) {  // Note [Sequence parallelism]: the sum of each rank's rows onto it
      const int64_t full = tp_.size * Nr * C;
      ops::matmul_forward(s, a.tmp_c, inp, weight, N, K, C);
      if (full > N * C) flat_fill(s, a.tmp_c.view(N * C, {full - N * C}), 0.0f);
      tensor_scatter_sum(a.tmp_c, Nr * C);
      ops::residual_forward(s, out, residual, a.tmp_c.view(r0 * C, {Nr * C}), Nr * C);
      return;
    }
    if (tp_.rank == 0)
      project_add(s, a.tmp_c, out, residual, inp, weight, N, K, C);
    else
      ops::matmul_forward(s, out, inp, weight, N, K, C);
    tensor_sum(out, N * C);
  };
  // attention block: res_mid = res + o_proj(attention(rope(q), rope(k), v))
  // The norms on this rank's rows, gathered whole for the column-parallel GEMMs.
  auto norm = [&](const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight) {
    ops::rmsnorm_forward(s, out.view(r0 * C, {Nr * C}), rstd, inp, weight, Nr, C, eps);
    if (sequence()) tensor_gather(out, Nr * C);
  };
  norm(x.ln1, x.rstd1, a.res[l], w(o.ln1, {C}));
  if (a.fused_projections) {  // Note [Fused projections]
    const int64_t QKV = Hd + 2 * KVd;
    ops::matmul_forward(s, a.qkv, x.ln1, w(o.q, {QKV, C}), N, C, QKV);
    ops::rope_forward(s, x.q, a.qkv, B, T, H, D, c.rope(), 0, Hd, QKV);
    ops::rope_forward(s, x.k, tail_view(a.qkv, Hd), B, T, KV, D, c.rope(), 0, KVd, QKV);
    tensor_copy_rows(s, x.v, KVd, tail_view(a.qkv, Hd + KVd), QKV, N, KVd);
  } else {
    ops::matmul_forward(s, x.q, x.ln1, w(o.q, {Hd, C}), N, C, Hd);
    ops::matmul_forward(s, x.k, x.ln1, w(o.k, {KVd, C}), N, C, KVd);
    ops::matmul_forward(s, x.v, x.ln1, w(o.v, {KVd, C}), N, C, KVd);
    ops::rope_forward(s, x.q, x.q, B, T, H, D, c.rope(), 0);
    ops::rope_forward(s, x.k, x.k, B, T, KV, D, c.rope(), 0);
  }
  ops::attention_forward(s, x.att, x.lse, x.q, x.k, x.v, B, T, T, H, KV, D);
  project(x.res_mid, a.res[l], x.att, w(o.o, {C, Hd}), Hd);
  // MLP block: res' = res_mid + down(silu(gate(x)) * up(x))
  norm(x.ln2, x.rstd2, x.res_mid, w(o.ln2, {C}));
  if (a.fused_projections) {
    ops::matmul_forward(s, x.gu, x.ln2, w(o.gate, {2 * I, C}), N, C, 2 * I);
  } else {
    ops::matmul_forward(s, x.gate, x.ln2, w(o.gate, {I, C}), N, C, I);
    ops::matmul_forward(s, x.up, x.ln2, w(o.up, {I, C}), N, C, I);
  }
  ops::swiglu_forward_rows(s, x.act, x.gate, x.up, N, I, a.gu_ld);
  project(a.res[l + 1], x.res_mid, x.act, w(o.down, {C, I}), I);
  if (acquire) release_weights(unit);
  a.live_layer = l;
}

void LlamaModel::forward_head(bool fused) {
  const int64_t N = arena_->B * arena_->T, C = config_.hidden_size, V = config_.vocab_size;
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
  if (!logits_f32_.defined() || logits_f32_.numel() < N * V) {
    ++version_;
    logits_f32_ = Tensor::empty({a.capacity * V}, DType::f32, device_, MemTag::activations);
  }
  ops::matmul_forward(*stream_, a.logits_x, a.lnf, w(layout_.lm_head(), {V, C}), N, C, V, V);
  ops::cast_bf16_to_f32(*stream_, logits_f32_.view(0, {N * V}), a.logits_x.view(0, {N * V}), N * V);
}

Tensor LlamaModel::forward_logits(const Tensor& inputs) {
  FANOUT_ASSERT(inputs.dim() == 2, "inputs must be (B, T), got ", inputs.str());
  FANOUT_ASSERT(whole(), "forward_logits of a pipeline stage");
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
  FANOUT_ASSERT(whole(), "forward_loss of a pipeline stage");
  forward_hidden(inputs, inputs.size(0), inputs.size(1));
  forward_loss_head(targets, stats, ignore_index);
}

void LlamaModel::forward_loss_head(const Tensor& targets, const Tensor& stats,
                                   int32_t ignore_index) {
  Arena& a = *arena_;
  const int64_t N = a.B * a.T;
  FANOUT_ASSERT(targets.numel() == N, "targets ", targets.str(), " for ", N, " tokens");
  forward_head(fused_classifier_);
  a.targets = targets;
  a.ignore_index = ignore_index;
  StreamSpan span(*stream_, "loss");
  if (tensor_parallel()) {  // Note [Tensor parallelism]: each row's parts, gathered, combined
    const int64_t part = N * 3;
    ops::cross_entropy_shard_forward(*stream_, a.ce_parts.view(tp_.rank * part, {part}), a.logits,
                                     targets, N, vrows_, config_.vocab_size, v0_, vocab_,
                                     ignore_index);
    tensor_gather(a.ce_parts, part);
    return ops::cross_entropy_shard_combine(*stream_, stats, a.lse_head, a.ce_parts, targets, N,
                                            tp_.size, ignore_index);
  }
  if (fused_classifier_)
    return ops::cross_entropy_fused_forward(*stream_, stats, a.lse_head, a.logits_x, targets, N,
                                            config_.vocab_size, ld_, ignore_index);
  ops::cross_entropy_forward(*stream_, stats, a.logits, targets, N, config_.vocab_size,
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

// --- pipeline stage ---------------------------------------------------------

void LlamaModel::stage_forward(const Tensor& inputs, int64_t B, int64_t T, const Tensor& targets,
                               const Tensor& stats, int32_t ignore_index) {
  FANOUT_ASSERT(arenas_.size() >= 1, "stage_forward before reserve_slots");
  forward_hidden(inputs, B, T);
  if (has_head()) forward_loss_head(targets, stats, ignore_index);
}

Tensor LlamaModel::stage_output() {
  FANOUT_ASSERT(!has_head(), "the last stage has no output hidden state");
  const int64_t n = arena_->B * arena_->T * config_.hidden_size;
  return (sequence() ? arena_->hidden_full : arena_->res[l1_]).view(0, {n});
}

Tensor LlamaModel::stage_input_grad() {
  FANOUT_ASSERT(!has_embedding(), "the first stage has no input gradient");
  const int64_t n = arena_->B * arena_->T * config_.hidden_size;
  return (sequence() ? arena_->dres_full : arena_->dres).view(0, {n});
}

}  // namespace fanout::models
