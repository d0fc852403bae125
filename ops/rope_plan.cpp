#include "ops/rope_plan.h"

#include <algorithm>

#include "engine/core/check.h"

namespace fanout::ops {

RopePlan rope_plan(int64_t B, int64_t T, int64_t H, int64_t D, int elem_bytes, int64_t ld_out,
                   int64_t ld_in, bool aligned) {
  FANOUT_ASSERT(elem_bytes == 2 || elem_bytes == 4, "rope_plan: elements of ", elem_bytes,
                " bytes");
  RopePlan p;
  if (B <= 0 || T <= 0 || H <= 0 || D < 2) return p;
  const int64_t half = D / 2;
  const int vec = 16 / elem_bytes;
  if (aligned && half % vec == 0 && ld_out % vec == 0 && ld_in % vec == 0) p.vec = vec;
  p.pair_tiles = (half + kRopePairTile - 1) / kRopePairTile;
  // Steps of one batch row in the block's tile, then enough batch rows to fill it.
  const int64_t per_b = H * (std::min(half, kRopePairTile) / p.vec);
  p.b_per_block = std::clamp<int64_t>((kRopeItemsPerBlock + per_b - 1) / per_b, 1, B);
  p.b_groups = (B + p.b_per_block - 1) / p.b_per_block;
  p.blocks = T * p.b_groups * p.pair_tiles;
  const int64_t items = p.b_per_block * per_b;
  // Enough threads for the steps, or for the table of a tile when there are fewer.
  const int64_t want = std::max(items, std::min(half, kRopePairTile));
  p.threads = static_cast<int>(std::clamp<int64_t>((want + 31) / 32 * 32, 32, kRopeMaxThreads));
  return p;
}

}  // namespace fanout::ops
