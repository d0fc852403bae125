#pragma once
// UnitStore: the interface through which a replica's model reaches the weights
// and gradients that zero2/zero3 keep sharded (the storage itself:
// engine/parallel/zero/sharded_storage.h), and ParamUnit, the range of the flat
// layout each acquire and release is about.

#include <cstdint>

#include "engine/core/tensor.h"

namespace fanout::parallel {

// A contiguous range of the flat layout that the model uses as a whole: the
// embedding, one decoder layer, the head. The unit of zero3's gathers and of
// zero2/zero3's gradient reductions.
struct ParamUnit {
  int64_t begin = 0, end = 0;
};

// Where a replica's weights (zero3) and gradients (zero2, zero3) live when the
// engine shards them (engine/parallel/zero/sharded_storage.h). The model brackets every use
// of a unit's buffers with acquire and release, on its host thread, in the order
// it queues the work on its compute stream; a buffer is valid for the work queued
// between the two calls. A unit may be acquired again after its release (forward,
// then backward). A gradient range has no release here: the replica reports it
// final through its grad-ready callback (Replica::set_grad_ready_callback), the
// one channel for that under every strategy; the store then reduces it onto the
// shards' owners and frees its buffer.
class UnitStore {
 public:
  virtual ~UnitStore() = default;
  // The unit's working weights, whole: (end - begin) elements of the working
  // dtype, ready for work queued on the compute stream from now on. `next` (or -1)
  // is the unit the model will ask for after this one: it is fetched meanwhile.
  virtual Tensor acquire_weights(int unit, int next) = 0;
  virtual void release_weights(int unit) = 0;
  // The f32 gradient accumulator of [begin, end), one of the replica's
  // grad_ranges() (inside `unit`), for this backward, zeroed; the host waits until
  // the ranges reported final before it were reduced and freed. Valid until the
  // replica reports the range final.
  virtual Tensor acquire_grads(int unit, int64_t begin, int64_t end) = 0;
};

}  // namespace fanout::parallel
