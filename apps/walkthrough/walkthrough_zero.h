#pragma once
// The walkthrough's zero2 and zero3 narration: the shards and units before the
// first step, where step 1's bytes went (gradients reduce-scattered unit by unit
// during backward; zero3's weight gathers, forward and backward), and each
// device's peak memory per kind next to zero1's and dp-output's.

#include <cstdint>
#include <string>
#include <vector>

#include "apps/walkthrough/walkthrough.h"
#include "apps/walkthrough/walkthrough_prose.h"
#include "engine/parallel/data_parallel.h"

namespace fanout::walkthrough::walk {

// What the narration reads from a zero2 or zero3 run.
struct ZeroRun {
  parallel::Strategy strategy = parallel::Strategy::zero2;
  std::vector<Device> devices;                        // one per replica
  std::vector<parallel::DataParallel::Shard> shards;  // DataParallel::shards()
  std::vector<parallel::ParamUnit> units;             // embedding, each layer, head
  int64_t working_bytes = 4;                          // per weight: f32 4, bf16 2
};

// "embedding", "layer 0", ..., "head".
std::string unit_name(const ZeroRun& z, size_t unit);

// The weight bytes zero3's gathers move between devices in one step, as the
// engine counts them (a piece copied from an owner on another device), for the
// replicas with rows: forward fetches every unit, backward the layers again (the
// head stays from forward; the embedding's backward reads no weights).
struct GatherBytes {
  int64_t forward = 0, backward = 0;
};
GatherBytes zero3_gather_bytes(const ZeroRun& z, const std::vector<int64_t>& rows);

// Before the first step: how the mode differs from zero1, who owns which shard
// (elements per device), and the units.
void zero_intro(Prose& p, const ZeroRun& z);
// Step 1 after reduce_gradients(): the gradient reduce-scatters (m.sums_sent)
// against zero1's, and zero3's gathers (m.weights_sent) against what the units
// predict (m.gather_forward, m.gather_backward); `reduce_s`: the host's wait.
void zero_reduce(Prose& p, const ZeroRun& z, const WalkthroughMode& m, double reduce_s,
                 const std::vector<WalkthroughMode>& done);
// After the memory table: each device's peaks per kind against zero1's and dp's.
void zero_compare(Prose& p, const ZeroRun& z, const WalkthroughMode& m,
                  const std::vector<WalkthroughMode>& done);

}  // namespace fanout::walkthrough::walk
