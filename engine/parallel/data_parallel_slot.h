#pragma once
// What DataParallel's own files share (data_parallel*.cpp): the per-replica
// slot of device buffers and timings, and the clock. Not for use elsewhere.

#include <chrono>
#include <memory>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/parallel/data_parallel.h"

namespace fanout::parallel {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What a recorded forward-backward depends on (Note [Step graphs]): the shapes
// and scalars the host passed, the buffers' addresses and the replica's.
struct GraphKey {
  int64_t rows = -1, T = 0;
  int32_t ignore_index = 0;
  uint32_t normalizer_bits = 0;
  const void *inputs = nullptr, *targets = nullptr, *stats = nullptr;
  uint64_t replica_version = 0;
  bool operator==(const GraphKey&) const = default;
};

// Per-replica device buffers and timings.
struct DataParallel::Slot {
  std::unique_ptr<Stream> comm;
  Tensor inputs, targets, stats;  // capacity-sized
  int64_t capacity = 0;           // tokens
  Tensor logits;                  // faithful dp: this replica's logits of the step
  double scatter_s = 0, forward_s = 0, backward_s = 0;
  LossStats loss;
  // Note [Step graphs]: the recorded forward-backward and its key; the key of the
  // last eager one (the next step with that key is recorded); whether recording
  // failed (the replica then runs eagerly for good); launches of the graph.
  std::unique_ptr<StreamGraph> graph;
  GraphKey graph_key, eager_key;
  bool graph_refused = false;
  int64_t graph_launches = 0;
};

}  // namespace fanout::parallel
