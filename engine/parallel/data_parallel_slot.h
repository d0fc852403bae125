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

// Per-replica device buffers and timings.
struct DataParallel::Slot {
  std::unique_ptr<Stream> comm;
  Tensor inputs, targets, stats;  // capacity-sized
  int64_t capacity = 0;           // tokens
  Tensor logits;                  // faithful dp: this replica's logits of the step
  double scatter_s = 0, forward_s = 0, backward_s = 0;
  LossStats loss;
};

}  // namespace fanout::parallel
