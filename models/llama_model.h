#pragma once
// LlamaModel: the hand-written Llama of DESIGN.md §3 on one device — flat
// parameters and gradients (LlamaLayout), an activation arena sized from the
// batch, forward to logits or to the loss, and backward from either, written op
// by op. It is the engine's Replica: DataParallel drives copies of it.

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/parallel/replica.h"
#include "models/llama_config.h"
#include "models/llama_layout.h"

namespace fanout::models {

constexpr int32_t kIgnoreIndex = -100;  // targets not counted by the loss (PyTorch's default)

class LlamaModel final : public parallel::Replica {
 public:
  // stream_name: the compute stream's trace lane (default "<device> compute").
  // working: the dtype of the working weights and of the activations that feed
  // GEMMs: f32, or bf16 for mixed precision (Note [Mixed precision]).
  LlamaModel(LlamaConfig config, Device device, std::string stream_name = "",
             DType working = DType::f32);
  ~LlamaModel() override;

  const LlamaConfig& config() const { return config_; }
  const LlamaLayout& layout() const { return layout_; }
  DType working_dtype() const { return working_dtype_; }

  // Normal(0, 0.02) for matrices and embeddings, ones for norms; depends only on
  // the seed (each tensor has its own generator), not on the device. The working
  // weights follow.
  void init_random(uint64_t seed);
  // A named parameter (or gradient) as a view of the flat buffer.
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;

  // --- Replica ---
  Device device() const override { return device_; }
  Stream& compute_stream() override { return *stream_; }
  Tensor params() override { return params_; }
  Tensor grads() override { return grads_; }
  Tensor working_params() override { return working_; }
  void params_to_working(int64_t begin, int64_t end) override;
  void zero_grads() override;
  void reserve(int64_t rows, int64_t seq_len) override;
  Tensor forward_logits(const Tensor& inputs) override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  void backward_from_logits(const Tensor& dlogits) override;
  void forward_loss(const Tensor& inputs, const Tensor& targets, const Tensor& stats,
                    int32_t ignore_index) override;
  void backward_from_loss(float normalizer) override;
  void set_grad_ready_callback(GradReadyFn fn) override { grad_ready_ = std::move(fn); }

 private:
  struct Arena;
  void forward_hidden(const Tensor& inputs, int64_t B, int64_t T);  // up to logits
  void backward_hidden(const Tensor& dlogits);                      // from dlogits down
  // Working weights (what forward and backward read) and f32 gradients.
  Tensor w(int64_t offset, Shape shape) const { return working_.view(offset, std::move(shape)); }
  Tensor g(int64_t offset, Shape shape) const { return grads_.view(offset, std::move(shape)); }

  LlamaConfig config_;
  LlamaLayout layout_;
  Device device_;
  std::unique_ptr<Stream> stream_;
  DType working_dtype_;
  Tensor params_, grads_;
  Tensor working_;  // params_ itself in fp32, a bf16 copy in mixed precision
  std::unique_ptr<Arena> arena_;
  GradReadyFn grad_ready_;
  // The last forward's batch.
  int64_t B_ = 0, T_ = 0;
  Tensor inputs_, targets_;
  int32_t ignore_index_ = kIgnoreIndex;
};

}  // namespace fanout::models
