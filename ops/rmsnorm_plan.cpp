#include "ops/rmsnorm_plan.h"

#include <algorithm>

namespace fanout::ops {

RmsnormGradPlan rmsnorm_grad_plan(int64_t N, int64_t C, bool aligned) {
  RmsnormGradPlan p;
  if (N <= 0 || C <= 0) return p;
  constexpr int64_t kLaneChannels = 32 * 8;  // a warp's 8-channel groups, one per lane
  p.one_pass = aligned && C % 8 == 0 && C <= kLaneChannels * kRmsnormMaxGroups;
  if (p.one_pass) {
    p.groups = static_cast<int>((C + kLaneChannels - 1) / kLaneChannels);
    // Whole rounds of the block's warps, few enough blocks that the partials stay
    // small and their sum short.
    const int64_t rounds = (N + kRmsnormRowWarps * kRmsnormOnePassBlocks - 1) /
                           (kRmsnormRowWarps * kRmsnormOnePassBlocks);
    p.rows_per_block = rounds * kRmsnormRowWarps;
  } else {
    // Enough chunks to fill the GPU, few enough that the partials stay small.
    const int64_t chunks = std::min<int64_t>(kRmsnormTwoPassChunks, (N + 63) / 64);
    p.rows_per_block = (N + chunks - 1) / chunks;
  }
  p.partials = (N + p.rows_per_block - 1) / p.rows_per_block;
  return p;
}

}  // namespace fanout::ops
