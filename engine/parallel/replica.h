#pragma once
// Replica: one model copy on one device, as the DataParallel engine drives it.
// The engine knows no model: it sees a flat parameter buffer, a flat gradient
// buffer of the same layout, and forward/backward either through the logits
// (faithful dp: the logits are gathered and the primary's loss runs on them) or
// through the loss (each replica computes its own loss sum and token count). All work is queued on
// the replica's compute stream; nothing here waits for it unless it says so.

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/parallel/unit_store.h"

namespace fanout::parallel {

class Replica {
 public:
  virtual ~Replica() = default;

  virtual Device device() const = 0;
  virtual Stream& compute_stream() = 0;

  // Elements of the flat layout.
  virtual int64_t num_params() const = 0;
  // The layout cut into units, in the order forward uses them; they cover
  // [0, num_params()) once.
  virtual std::vector<ParamUnit> units() const = 0;
  // The ranges backward hands over one by one under zero2/zero3 (UnitStore::
  // release_grads), in decreasing order, each inside one unit, together covering
  // the layout once: units(), or finer where a model produces a large unit's
  // gradient in parts so that less of it exists at once.
  virtual std::vector<ParamUnit> grad_ranges() const { return units(); }
  // zero2 (weights = false): gradients live in `store`, and grads() is no longer
  // available; zero3 (weights = true): the weights too, and params(),
  // working_params() are not available either. Called once, before any other use
  // of the replica's buffers, so that the flat buffers it replaces are never
  // allocated.
  virtual void set_unit_store(UnitStore* store, bool weights) = 0;

  // Flat f32 parameters and gradients, same layout (so replicate = one copy of
  // params(), reduce = one sum of grads(), buckets = contiguous ranges).
  virtual Tensor params() = 0;
  virtual Tensor grads() = 0;
  virtual void zero_grads() = 0;

  // The weights forward and backward read, same layout as params(): params()
  // itself in fp32, a bf16 copy under mixed precision (Note [Mixed precision] in
  // models/llama_model.cpp). Replicas are kept in step through this buffer: after
  // an update only the working weights travel (half the bytes in bf16).
  virtual Tensor working_params() { return params(); }
  virtual DType working_dtype() const { return DType::f32; }
  // working_params()[begin, end) <- params()[begin, end), rounded to nearest even;
  // queued on the compute stream. Nothing to do when they are one buffer.
  virtual void params_to_working(int64_t /*begin*/, int64_t /*end*/) {}

  // Rows of the batch this replica can take at once (its activation capacity).
  virtual void reserve(int64_t rows, int64_t seq_len) = 0;

  // inputs (B, T) i32 -> logits (B, T, V) f32 into a replica-owned tensor (valid
  // until the next forward).
  virtual Tensor forward_logits(const Tensor& inputs) = 0;
  virtual int64_t vocab_size() const = 0;
  // grads += d(loss)/d(params) given dlogits (B, T, V) for the last forward.
  virtual void backward_from_logits(const Tensor& dlogits) = 0;
  // The replica's loss on logits gathered from every replica onto another
  // device (faithful dp, on output_device's stream): the model owns its loss
  // wherever it runs. stats (2) f32 <- {sum of token losses, counted tokens}.
  virtual void logits_loss(Stream& stream, const Tensor& logits, const Tensor& targets,
                           const Tensor& stats, int32_t ignore_index) = 0;
  // logits (B, T, V) <- d(loss_sum / normalizer)/d(logits), in place.
  virtual void logits_loss_backward(Stream& stream, const Tensor& logits, const Tensor& targets,
                                    int32_t ignore_index, float normalizer) = 0;

  // inputs, targets (B, T) i32 -> stats (2) f32 = {sum of token losses, counted
  // tokens}; targets equal to ignore_index are not counted.
  virtual void forward_loss(const Tensor& inputs, const Tensor& targets, const Tensor& stats,
                            int32_t ignore_index) = 0;
  // grads += d(loss_sum / normalizer)/d(params) for the last forward_loss.
  // The normalizer is the global counted-token total, so replicas agree.
  virtual void backward_from_loss(float normalizer) = 0;

  // The one channel by which a gradient range becomes final, under every
  // strategy: called on the host thread, during backward, each time the
  // gradients of [begin, end) (one of grad_ranges(), elements of the flat
  // layout) have all been queued on the compute stream and will not be touched
  // again this step. Ranges arrive in decreasing offset order and together cover
  // the layout once. The engine starts bucket reductions on it (--overlap) and,
  // under a unit store (zero2, zero3), reduces and frees the range's buffer;
  // a replica with a unit store must have one. Pass an empty function to disable.
  using GradReadyFn = std::function<void(int64_t begin, int64_t end)>;
  virtual void set_grad_ready_callback(GradReadyFn fn) = 0;

  // Changes whenever a buffer that forward or backward uses may have moved, or
  // what they queue may have changed (a setting): a recorded graph of them
  // (Note [Step graphs] in engine/parallel/data_parallel_graphs.cpp) is replayed
  // only at the version it was recorded at.
  virtual uint64_t buffers_version() const = 0;
};

}  // namespace fanout::parallel
