#pragma once
// LlamaModel: the hand-written Llama of DESIGN.md §3 on one device — flat
// parameters and gradients (LlamaLayout), an activation arena sized from the
// batch, forward to logits or to the loss, and backward from either, written op
// by op. It is the engine's Replica: DataParallel drives copies of it; and its
// PipeStage: a Pipeline drives pieces of it (Note [Pipeline stages]).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/parallel/pipeline/stage.h"
#include "engine/parallel/replica.h"
#include "models/llama_config.h"
#include "models/llama_layout.h"
#include "models/llama_tensor.h"

namespace fanout::models {

constexpr int32_t kIgnoreIndex = -100;  // targets not counted by the loss (PyTorch's default)

// Note [Fused projections]: whether models made from now on compute q/k/v as one
// GEMM and gate/up as one (true) or each on its own (false, the default); for the whole
// process (train's and bench's --projections), as LlamaModel::set_fused_projections
// is for one model.
void set_fused_projections_default(bool on);
bool fused_projections_default();

class LlamaModel final : public parallel::Replica, public parallel::PipeStage {
 public:
  // stream_name: the compute stream's trace lane (default "<device> compute").
  // working: the dtype of the working weights and of the activations that feed
  // GEMMs: f32, or bf16 for mixed precision (Note [Mixed precision]).
  // tensor: with size > 1, this model is shard `rank` of the whole `config`
  // (Note [Tensor parallelism]): config() and layout() are the shard's.
  LlamaModel(LlamaConfig config, Device device, std::string stream_name = "",
             DType working = DType::f32, TensorShard tensor = {});
  ~LlamaModel() override;

  const LlamaConfig& config() const { return config_; }
  const TensorShard& tensor_shard() const { return tp_; }
  // Note [Fused classifier] (ops/cross_entropy.h): the loss reads bf16 logits of
  // the padded vocabulary and turns them into their gradient in place. On by
  // default for bf16 on CUDA devices; CPU devices can take it too (the tests of
  // the model's fused path). Only for a bf16 working dtype, before the first forward.
  void set_fused_classifier(bool on);
  bool fused_classifier() const { return fused_classifier_; }
  const LlamaLayout& layout() const { return layout_; }
  DType working_dtype() const override { return working_dtype_; }
  // Note [Pipeline stages]: hold and run only units [first_unit, last_unit) of
  // units(). Before any buffer exists and before set_unit_store (a stage's store
  // holds its gradients only: zero2 within a pipeline stage).
  void set_stage(int first_unit, int last_unit);
  // Note [Recompute]: keep each layer's input only and compute its forward again
  // inside backward (bit-identical results). Before the first forward.
  void set_recompute(bool on);
  bool recompute() const { return recompute_; }
  // Note [Fused projections]: q/k/v as one GEMM, gate/up as one. The same values
  // either way, up to the GEMMs' summation order. Before the first forward.
  void set_fused_projections(bool on);
  bool fused_projections() const { return fused_projections_; }

  // Normal(0, 0.02) for matrices and embeddings, ones for norms; depends only on
  // the seed (each tensor has its own generator), not on the device. The working
  // weights follow.
  void init_random(uint64_t seed);
  // The same values on the host, without a model.
  static std::vector<float> random_params(const LlamaConfig& config, uint64_t seed);
  // A named parameter (or gradient) as a view of the flat buffer (not under a
  // unit store, whose buffers exist only between acquire and release).
  Tensor param(const std::string& name);
  Tensor grad(const std::string& name);

  // --- Replica ---
  Device device() const override { return device_; }
  Stream& compute_stream() override { return *stream_; }
  int64_t num_params() const override { return layout_.total(); }
  // The embedding, each decoder layer, then the final norm with the lm_head
  // (when untied) as the head.
  std::vector<parallel::ParamUnit> units() const override { return units_; }
  // units(), with an untied head cut into the final norm and blocks of the
  // lm_head's rows no larger than a layer (Note [The head's gradient in parts]).
  std::vector<parallel::ParamUnit> grad_ranges() const override { return grad_ranges_; }
  void set_unit_store(parallel::UnitStore* store, bool weights) override;
  Tensor params() override;
  Tensor grads() override;
  Tensor working_params() override;
  void params_to_working(int64_t begin, int64_t end) override;
  void zero_grads() override;
  void reserve(int64_t rows, int64_t seq_len) override;
  // (B, T, V); a tensor-parallel shard's: the columns of its vocabulary rows
  // (config().vocab_size of them, the last shard's past the whole vocabulary
  // padding), every rank of the group calling at once.
  Tensor forward_logits(const Tensor& inputs) override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  void backward_from_logits(const Tensor& dlogits) override;
  void logits_loss(Stream& stream, const Tensor& logits, const Tensor& targets, const Tensor& stats,
                   int32_t ignore_index) override;
  void logits_loss_backward(Stream& stream, const Tensor& logits, const Tensor& targets,
                            int32_t ignore_index, float normalizer) override;
  void forward_loss(const Tensor& inputs, const Tensor& targets, const Tensor& stats,
                    int32_t ignore_index) override;
  void backward_from_loss(float normalizer) override;
  void set_grad_ready_callback(GradReadyFn fn) override { grad_ready_ = std::move(fn); }
  uint64_t buffers_version() const override { return version_; }

  // --- PipeStage ---
  parallel::ParamUnit stage_range() const override { return {base_, top_}; }
  parallel::Replica& as_replica() override { return *this; }
  std::vector<parallel::FlatPiece> pieces() const override;
  int64_t hidden_size() const override { return config_.hidden_size; }
  Tensor tied_weights() override { return tied_w_; }
  Tensor tied_grads() override { return tied_g_; }
  void reserve_slots(int slots, int64_t rows, int64_t seq_len, bool split_backward) override;
  void use_slot(int slot) override;
  void stage_forward(const Tensor& inputs, int64_t B, int64_t T, const Tensor& targets,
                     const Tensor& stats, int32_t ignore_index) override;
  Tensor stage_output() override;
  void stage_backward(const Tensor& dout, float normalizer, bool split) override;
  void backward_weight() override;
  Tensor stage_input_grad() override;

 private:
  struct Arena;  // models/llama_arena.h
  std::unique_ptr<Arena> make_arena(int64_t tokens) const;
  // The stage's units up to the final norm (inputs: tokens with the embedding, the
  // hidden state entering the stage without); then the head: f32 logits (N, V),
  // or, fused, bf16 logits rows ld_ apart.
  void forward_hidden(const Tensor& inputs, int64_t B, int64_t T);
  void forward_layer(int64_t l, bool acquire = true);
  void take_rows(const Tensor& mine, const Tensor& whole, int64_t N);
  void forward_head(bool fused);
  // The loss of the current slot's batch (forward_loss, the last stage) and its
  // gradient: the logits' gradient, rows ld apart, that backward_hidden reads.
  void forward_loss_head(const Tensor& targets, const Tensor& stats, int32_t ignore_index);
  std::pair<Tensor, int64_t> loss_backward(float normalizer);
  // From dlogits (N rows ld apart; the head's stage) or from the arena's dres
  // (the next stage's input gradient) down; split: Note [Split backward].
  void backward_hidden(const Tensor& dlogits, int64_t ld, bool split = false);
  void backward_head(const Tensor& dlogits, int64_t ld, bool split);
  void backward_layer(int64_t l, bool split);
  void backward_embedding();
  void embedding_grad();
  // The stage's units and layers: units_[first_unit_, last_unit_), layers [l0_, l1_).
  bool has_embedding() const { return first_unit_ == 0; }
  bool has_head() const { return last_unit_ == static_cast<int>(units_.size()); }
  bool whole() const { return has_embedding() && has_head(); }
  // The flat weights (unless zero3's store holds them) and gradients (unless a
  // store holds them), allocated at first use (Note [Lazy flat buffers]).
  void ensure_params();
  void ensure_grads();
  // Note [The head's gradient in parts]: fn(dw, row0, rows) for each block of
  // rows of the (vocab, hidden) table at flat offset `table`, from the top, each
  // block's gradient acquired before and released (reduced) after.
  void table_grad_in_parts(int unit, int64_t table,
                           const std::function<void(const Tensor&, int64_t, int64_t)>& fn);
  // Working weights (what forward and backward read) and f32 gradients: views of
  // the flat buffers (offsets of the whole layout; a stage's buffers start at
  // base_, and a tied lm_head outside it reads tied_w_), or of the unit's buffers
  // under a unit store.
  Tensor w(int64_t offset, Shape shape) const;
  Tensor g(int64_t offset, Shape shape) const;
  int unit_of(int64_t offset) const;
  // A unit's buffers, around its use (no-ops without a store, except that
  // release_grads reports the range final through the grad-ready callback, the
  // one channel for it: --overlap's buckets, or zero2/zero3's store).
  void acquire_weights(int unit, int next);
  void release_weights(int unit);
  void acquire_grads(int unit, int64_t begin, int64_t end);
  void release_grads(int unit, int64_t begin, int64_t end);
  void acquire_grads(int unit) { acquire_grads(unit, units_[unit].begin, units_[unit].end); }
  void release_grads(int unit) { release_grads(unit, units_[unit].begin, units_[unit].end); }
  int head_unit() const { return static_cast<int>(units_.size()) - 1; }
  // Note [Tensor parallelism]: buf[0, n) summed over the tensor-parallel group
  // (nothing without one).
  void tensor_sum(const Tensor& buf, int64_t n);
  bool tensor_parallel() const { return tp_.size > 1; }
  // Note [Sequence parallelism]: whether the residual stream is sharded by rows,
  // the rows each rank holds of n tokens, where this rank's start in a gathered
  // buffer, and the gather (all-gather) and the sum of a gathered buffer's parts
  // onto their owners (reduce-scatter), `part` elements per rank.
  bool sequence() const { return tp_.sequence && tensor_parallel(); }
  int64_t seq_rows(int64_t n) const { return sequence() ? (n + tp_.size - 1) / tp_.size : n; }
  int64_t seq_offset(int64_t n) const { return sequence() ? tp_.rank * seq_rows(n) : 0; }
  void tensor_gather(const Tensor& full, int64_t part);
  void tensor_scatter_sum(const Tensor& full, int64_t part);
  // Sequence parallelism: this rank's rows of d(residual) gathered into dres_full.
  void gather_dres();

  LlamaConfig whole_config_;  // the whole model's (tensor parallelism: config_ is a shard's)
  TensorShard tp_;
  LlamaConfig config_;
  LlamaLayout layout_;
  // The whole vocabulary, and this shard's rows of it: [v0_, v0_ + vrows_) (all
  // of it without tensor parallelism).
  int64_t vocab_ = 0, v0_ = 0, vrows_ = 0;
  Device device_;
  std::unique_ptr<Stream> stream_;
  DType working_dtype_;
  bool fused_classifier_ = false;
  int64_t ld_ = 0;     // the logits' row stride: V, or the padded vocabulary when fused
  Tensor logits_f32_;  // fused: forward_logits' (N, V) f32 logits, allocated at first use
  Tensor params_, grads_;
  Tensor working_;  // params_ itself in fp32, a bf16 copy in mixed precision
  std::vector<parallel::ParamUnit> units_, grad_ranges_;
  int64_t head_rows_per_part_ = 0;                 // lm_head rows per gradient range (untied)
  parallel::UnitStore* store_ = nullptr;           // zero2/zero3: gradients live there
  bool store_weights_ = false;                     // zero3: weights too
  std::vector<Tensor> unit_weights_, unit_grads_;  // under the store, while acquired
  std::vector<int64_t> unit_grads_base_;           // the flat offset of unit_grads_[u][0]
  bool head_held_ = false;  // forward keeps the head's weights for the backward that follows
  // One activation arena per slot (one outside pipelines); arena_ is the current.
  std::vector<std::unique_ptr<Arena>> arenas_;
  Arena* arena_ = nullptr;
  GradReadyFn grad_ready_;
  // Note [Pipeline stages]: the units and layers held, and their flat range.
  int first_unit_ = 0, last_unit_ = 0;
  int64_t l0_ = 0, l1_ = 0, base_ = 0, top_ = 0;
  Tensor tied_w_, tied_g_;  // a tied lm_head on a stage without the embedding
  bool recompute_ = false;
  bool fused_projections_ = false;
  bool split_backward_ = false;  // slots keep the weight GEMMs' output gradients
  uint64_t version_ = 0;         // buffers_version(): bumped by every (re)allocation and setting
};

}  // namespace fanout::models
