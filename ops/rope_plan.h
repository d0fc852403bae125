#pragma once
// How RoPE's CUDA kernel (ops/cuda/rope.cu) divides its work, in plain C++ so that
// every build tests it: a block takes one position t, a group of batch rows and a
// tile of pairs; it computes those pairs' cos and sin once into shared memory, then
// rotates every (b, h) row of the group with 16-byte loads where the layout allows.
// rope_block and rope_item are the kernel's own index arithmetic.

#include <cstdint>

#include "ops/rope_freq.h"  // FANOUT_ROPE_HOST_DEVICE

namespace fanout::ops {

constexpr int64_t kRopePairTile = 512;        // pairs whose cos and sin one block keeps
constexpr int64_t kRopeItemsPerBlock = 1024;  // rotation steps a block aims for
constexpr int kRopeMaxThreads = 256;

struct RopePlan {
  int vec = 1;              // pairs a rotation step takes: 16 bytes of one half, or 1
  int64_t pair_tiles = 0;   // tiles of at most kRopePairTile pairs per head
  int64_t b_per_block = 0;  // batch rows a block rotates
  int64_t b_groups = 0;     // ceil(B / b_per_block)
  int64_t blocks = 0;       // T * b_groups * pair_tiles; 0 when there is no work
  int threads = 0;          // per block, a multiple of 32
};

// The plan for (B, T, H, D) rows of `elem_bytes`-byte elements (4: f32, 2: bf16),
// rows ld_out and ld_in elements apart. `aligned`: both base pointers are on a
// 16-byte boundary. Vector steps need that, D/2 and both strides multiples of vec.
RopePlan rope_plan(int64_t B, int64_t T, int64_t H, int64_t D, int elem_bytes, int64_t ld_out,
                   int64_t ld_in, bool aligned);

// ---

// What block `block` of a plan covers: position t, batch rows [b0, b0 + nb), pairs
// [i0, i0 + pairs) of every head.
struct RopeBlock {
  int64_t t, b0, nb, i0, pairs;
};

FANOUT_ROPE_HOST_DEVICE inline RopeBlock rope_block(const RopePlan& p, int64_t block, int64_t B,
                                                    int64_t D) {
  const int64_t tile = block % p.pair_tiles;
  const int64_t rest = block / p.pair_tiles;
  const int64_t group = rest % p.b_groups;
  RopeBlock r;
  r.t = rest / p.b_groups;
  r.b0 = group * p.b_per_block;
  r.nb = B - r.b0 < p.b_per_block ? B - r.b0 : p.b_per_block;
  r.i0 = tile * kRopePairTile;
  r.pairs = D / 2 - r.i0 < kRopePairTile ? D / 2 - r.i0 : kRopePairTile;
  return r;
}

// Rotation steps in a block: one per (batch row, head, vec pairs).
FANOUT_ROPE_HOST_DEVICE inline int64_t rope_items(const RopePlan& p, const RopeBlock& r,
                                                  int64_t H) {
  return r.nb * H * (r.pairs / p.vec);
}

// Step j of a block: batch row b, head h, first pair i (within the tile).
struct RopeItem {
  int64_t b, h, i;
};

FANOUT_ROPE_HOST_DEVICE inline RopeItem rope_item(const RopePlan& p, const RopeBlock& r, int64_t H,
                                                  int64_t j) {
  const int64_t per_head = r.pairs / p.vec;
  const int64_t bh = j / per_head;
  return {r.b0 + bh / H, bh % H, (j - bh * per_head) * p.vec};
}

}  // namespace fanout::ops
