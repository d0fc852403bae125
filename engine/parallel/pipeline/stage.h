#pragma once
// PipeStage: a contiguous run of a model's units (embedding, decoder layers,
// norm + head) on one device, as the Pipeline engine drives it. The engine knows
// no model: it sees the stage's piece of the flat layout, the hidden state that
// crosses a stage boundary (tokens x hidden_size f32, forward and backward), and
// activation slots, one per micro-batch in flight. Every call queues work on the
// stage's compute stream; nothing here waits for it.

#include <cstdint>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/parallel/replica.h"
#include "engine/parallel/unit_store.h"

namespace fanout::parallel {

// Where a stage's elements sit in the whole model's flat layout (checkpoints,
// the optimizer's state): `count` elements at `local` of the stage's own layout
// are the whole model's at `whole`. Without tensor parallelism the stage's layout
// is the whole model's (one piece, local == whole); a tensor-parallel shard holds
// slices of most tensors, and whole copies of the rest (shared: every rank of
// the group holds the same values, which count once, as rank 0's; partial: each
// rank's gradient of them is a part of the whole one -- sequence parallelism --
// and the engine sums them over the group before the update).
struct FlatPiece {
  int64_t local = 0, whole = 0, count = 0;
  bool shared = false, partial = false;
};

class PipeStage {
 public:
  virtual ~PipeStage() = default;

  virtual Device device() const = 0;
  virtual Stream& compute_stream() = 0;
  // The same model as a Replica, for zero2 within a stage: its replicas keep
  // their gradients in a ShardedStorage over the stage's units (Replica::
  // set_unit_store with weights = false, grad_ranges, the grad-ready callback),
  // and grads() is then unavailable.
  virtual Replica& as_replica() = 0;

  // The elements [begin, end) of the stage's model layout (the whole model's, or
  // a tensor-parallel shard's) this stage holds and updates; params(), grads()
  // and working_params() are that range alone.
  virtual ParamUnit stage_range() const = 0;
  // stage_range() in pieces of the whole model's layout (FlatPiece), in order.
  virtual std::vector<FlatPiece> pieces() const = 0;
  virtual Tensor params() = 0;
  virtual Tensor grads() = 0;
  virtual Tensor working_params() = 0;
  virtual DType working_dtype() const = 0;
  // working [begin, end) <- params [begin, end), offsets of the whole layout.
  virtual void params_to_working(int64_t begin, int64_t end) = 0;
  virtual void zero_grads() = 0;

  // Elements per token of the hidden state that crosses a stage boundary (f32).
  virtual int64_t hidden_size() const = 0;
  // Tied embeddings on a last stage that does not hold the embedding: the
  // lm_head's working weights (a copy of the first stage's embedding, which the
  // engine refreshes after each update) and their f32 gradient (which the engine
  // adds to the first stage's before the update). Undefined otherwise.
  virtual Tensor tied_weights() = 0;
  virtual Tensor tied_grads() = 0;

  // Activation memory for `slots` micro-batches of up to rows x seq_len tokens in
  // flight at once; split_backward: each slot also keeps what the weight
  // gradients need between backward_input and backward_weight (zero bubble).
  virtual void reserve_slots(int slots, int64_t rows, int64_t seq_len, bool split_backward) = 0;
  // The slot the following calls are about.
  virtual void use_slot(int slot) = 0;
  // Forward of a (B, T) micro-batch. inputs: tokens (B, T) i32 on the first
  // stage, the previous stage's hidden state (B * T * hidden_size f32, on this
  // device) elsewhere. The last stage computes the loss: stats (2) f32 <- {sum
  // of token losses, counted tokens}, targets equal to ignore_index not counted;
  // the others leave their hidden state in stage_output().
  virtual void stage_forward(const Tensor& inputs, int64_t B, int64_t T, const Tensor& targets,
                             const Tensor& stats, int32_t ignore_index) = 0;
  virtual Tensor stage_output() = 0;  // valid until the slot's next forward
  // grads += d(loss_sum / normalizer)/d(params) for the slot's micro-batch: from
  // its loss on the last stage, from dout (the next stage's input gradient,
  // B * T * hidden_size f32 on this device) elsewhere. split: only what the input
  // gradient needs (norm weights included); the weight GEMMs wait for
  // backward_weight(). The input gradient is then in stage_input_grad() (not on
  // the first stage), valid until the slot's next backward.
  virtual void stage_backward(const Tensor& dout, float normalizer, bool split) = 0;
  virtual void backward_weight() = 0;
  virtual Tensor stage_input_grad() = 0;
};

}  // namespace fanout::parallel
