#pragma once
// Refuses, before anything is allocated, a batch whose memory cannot fit this
// machine: every size is a checked product (an overflow names what overflowed),
// and what the CPU devices need at the least is compared with physical memory.
// train, bench and walkthrough share it, so a size is refused the same way in all.

#include <cstdint>
#include <vector>

#include "engine/core/device.h"
#include "models/llama_config.h"

namespace fanout::train {

struct MemoryAsk {
  int64_t batch_rows = 0;    // rows of one (micro-)batch, all replicas together
  int64_t replica_rows = 0;  // the largest share one replica computes
  int64_t seq_len = 0;
  bool gather_logits = false;    // faithful dp: the batch's logits gathered on devices[0]
  bool optimizer_state = false;  // AdamW's two moments (training, not benchmarks of forward)
  // zero2: the gradients, zero3: the weights too, are split over `shards` owners
  // (devices, or processes), each replica holding at least its share.
  bool sharded_grads = false, sharded_weights = false;
  int64_t shards = 1;
};

// Throws fanout::Error "a batch of R x T tokens needs at least N GiB of memory, more
// than this machine's M GiB; ..." CUDA devices are left to their allocator; a lower
// bound is compared, so a batch that fits is never refused.
void memory_check_fits(const models::LlamaConfig& config, const std::vector<Device>& devices,
                       const MemoryAsk& ask);

// The largest of `rows` split over `replicas` as the engine splits (10 over 4: 3).
int64_t memory_largest_share(int64_t rows, int64_t replicas);

}  // namespace fanout::train
