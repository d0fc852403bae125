// Step graphs: each replica's forward and backward recorded once per batch
// shape and replayed as one launch (DataParallelOptions::graphs).
#include <bit>
#include <cstdio>

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "engine/parallel/data_parallel_slot.h"

namespace fanout::parallel {

// Note [Step graphs]
// ~~~~~~~~~~~~~~~~~~
// With the loss on the replicas, a replica's forward and backward are work on
// its compute stream alone, between the batch's upload and the loss's readback;
// on a GPU, a small model's step spends much of it on the host launching
// hundreds of short kernels. With graphs on, the engine records that stretch
// once (Note [Stream graphs] in engine/core/stream_graph.cpp) and replays it each
// step with one launch, reading the loss after the backward instead of between
// the two (one wait for the device per step, not two).
//
// A replay repeats the recorded host decisions, so the graph is keyed
// (GraphKey) on what the host passed: the rows and sequence length, the ignore
// index, the normalizer's bits, the addresses of the inputs, targets and loss
// statistics, and the replica's buffers_version() (its activations, weights
// and gradients, and its settings). A step whose key differs from the graph's
// runs eagerly, and the step after it, if the key is the same, is recorded: the
// eager step allocates what the model allocates on first use (activations, the
// GEMMs' workspaces, cuDNN's plans), which a recording must not (it would hold
// memory that the host frees). So a run records once, at its second step, and
// again when the key changes for good; a key seen once (a last, smaller batch)
// runs eagerly and leaves the graph in place, unless the replica's buffers
// moved, which drops it.
//
// Only what runs between upload and readback is recorded: the gradient
// reduction, the optimizer and the broadcasts stay as they are. Modes that
// need the host in the middle of backward (overlapping buckets, zero2 and
// zero3's per-unit hand-over, the logits gathered onto the output device) are
// refused. A recording that fails -- the host waits for the stream inside it,
// allocates memory, or CUDA refuses a call -- costs nothing but one line: the
// replica runs eagerly from then on. Profiling (`bench --kernels`) times each op
// eagerly, so steps under a profile are not recorded.
//
// The results are the eager step's bit for bit: the same kernels with the same
// arguments on the same buffers. The CPU suite checks that, as it does the
// refusals, with CPU streams' recordings; the GPU suite does on CUDA.

namespace {

GraphKey key_of(Replica& rep, const Tensor& inputs, const Tensor& targets, const Tensor& stats,
                int32_t ignore_index, float normalizer) {
  GraphKey k;
  k.rows = inputs.size(0), k.T = inputs.size(1);
  k.ignore_index = ignore_index;
  k.normalizer_bits = std::bit_cast<uint32_t>(normalizer);
  k.inputs = inputs.raw(), k.targets = targets.raw(), k.stats = stats.raw();
  k.replica_version = rep.buffers_version();
  return k;
}

}  // namespace

bool DataParallel::run_graphed(int r, const Tensor& inputs, const Tensor& targets,
                               int32_t ignore_index, float normalizer) {
  Slot& slot = *slots_[r];
  Replica& rep = *replicas_[r];
  if (!options_.graphs || slot.graph_refused || op_profile_enabled()) return false;
  const GraphKey key = key_of(rep, inputs, targets, slot.stats, ignore_index, normalizer);
  Stream& s = rep.compute_stream();
  if (!slot.graph || !(slot.graph_key == key)) {
    // Moved buffers: that graph will never match again (and a CPU recording
    // would keep the old buffers alive).
    if (slot.graph && slot.graph_key.replica_version != key.replica_version) slot.graph.reset();
    if (!(slot.eager_key == key)) return false;  // first at this key: eager
    slot.graph.reset();
    s.begin_capture();
    try {
      rep.forward_loss(inputs, targets, slot.stats, ignore_index);
      rep.backward_from_loss(normalizer);
      slot.graph = s.end_capture();
    } catch (const std::exception& e) {
      s.abort_capture();
      slot.graph_refused = true;
      std::fprintf(stderr,
                   "%s: the step could not be recorded as a graph, so it runs without: %s\n",
                   s.name().c_str(), e.what());
      return false;
    }
    slot.graph_key = key;
  }
  if (options_.fault_hook) options_.fault_hook(r, "backward");
  slot.graph->launch(s);
  ++slot.graph_launches;
  return true;
}

void DataParallel::note_eager_step(int r, const Tensor& inputs, const Tensor& targets,
                                   int32_t ignore_index, float normalizer) {
  Slot& slot = *slots_[r];
  if (!options_.graphs || slot.graph_refused) return;
  slot.eager_key = key_of(*replicas_[r], inputs, targets, slot.stats, ignore_index, normalizer);
}

int64_t DataParallel::graph_launches() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += s->graph_launches;
  return n;
}

}  // namespace fanout::parallel
