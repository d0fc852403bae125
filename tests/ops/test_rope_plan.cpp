// RoPE's CUDA work division (ops/rope_plan.h) on any machine: the kernel's own
// index arithmetic, walked on the host, rotates every pair of every (b, t, h) row
// exactly once; vector steps land on 16-byte boundaries of both tensors; a batch
// group computes each angle once; the empty shapes launch nothing.

#include <doctest/doctest.h>

#include <vector>

#include "ops/rope_plan.h"

using namespace fanout::ops;

namespace {

struct Shape {
  int64_t B, T, H, D;
};

// Walks every block and step of the plan as the kernel does; counts the rotations
// of each pair (b, t, h, i) and checks each step's addresses. Elements from the
// base pointer, both tensors: (b T + t) ld + h D + pair.
void check_covers_once(const Shape& s, int elem_bytes, int64_t ld_out, int64_t ld_in,
                       bool aligned) {
  const auto [B, T, H, D] = s;
  CAPTURE(B);
  CAPTURE(T);
  CAPTURE(H);
  CAPTURE(D);
  CAPTURE(elem_bytes);
  CAPTURE(ld_out);
  CAPTURE(ld_in);
  CAPTURE(aligned);
  const RopePlan p = rope_plan(B, T, H, D, elem_bytes, ld_out, ld_in, aligned);
  const int64_t half = D / 2;
  REQUIRE(p.blocks == T * p.b_groups * p.pair_tiles);
  REQUIRE(p.threads % 32 == 0);
  REQUIRE(p.threads >= 32);
  REQUIRE(p.threads <= kRopeMaxThreads);
  CHECK(p.b_groups == (B + p.b_per_block - 1) / p.b_per_block);
  std::vector<int> count(B * T * H * half, 0);
  const int elems_per_16 = 16 / elem_bytes;
  bool addresses_ok = true, ranges_ok = true;
  for (int64_t block = 0; block < p.blocks; ++block) {
    const RopeBlock r = rope_block(p, block, B, D);
    ranges_ok = ranges_ok && r.t >= 0 && r.t < T && r.nb >= 1 && r.b0 + r.nb <= B && r.pairs >= 1 &&
                r.pairs <= kRopePairTile && r.i0 + r.pairs <= half;
    if (!ranges_ok) break;
    for (int64_t j = 0; j < rope_items(p, r, H); ++j) {
      const RopeItem it = rope_item(p, r, H, j);
      ranges_ok = ranges_ok && it.b >= r.b0 && it.b < r.b0 + r.nb && it.h >= 0 && it.h < H &&
                  it.i >= 0 && it.i + p.vec <= r.pairs;
      if (!ranges_ok) break;
      const int64_t row = it.b * T + r.t, col = it.h * D + r.i0 + it.i;
      if (p.vec > 1) {
        for (int64_t e : {row * ld_out + col, row * ld_in + col, row * ld_out + col + half,
                          row * ld_in + col + half})
          addresses_ok = addresses_ok && e % elems_per_16 == 0;
      }
      for (int k = 0; k < p.vec; ++k)
        ++count[((it.b * T + r.t) * H + it.h) * half + r.i0 + it.i + k];
    }
  }
  REQUIRE(ranges_ok);
  CHECK(addresses_ok);
  int64_t wrong = 0;
  for (int c : count) wrong += c != 1;
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("rope plan rotates every pair exactly once, in the kernel's own index arithmetic") {
  const Shape shapes[] = {{1, 1, 1, 2},    {2, 3, 5, 6},    {3, 17, 4, 64},  {16, 64, 12, 64},
                          {16, 64, 3, 64}, {1, 1, 32, 128}, {2, 5, 3, 2048}, {1, 2, 1, 1026},
                          {300, 2, 1, 16}, {5000, 1, 1, 2}, {2, 3, 7, 14},   {1, 1, 1, 1040}};
  for (const Shape& s : shapes) {
    for (int elem_bytes : {2, 4}) {
      for (bool aligned : {true, false}) {
        const int64_t row = s.H * s.D;
        check_covers_once(s, elem_bytes, row, row, aligned);
        check_covers_once(s, elem_bytes, row + 8, row + 24, aligned);  // fused q/k/v rows
        check_covers_once(s, elem_bytes, row + 3, row, aligned);       // an odd stride
      }
    }
  }
}

TEST_CASE("rope plan takes 16-byte steps exactly where every row allows them") {
  // bf16: 8 pairs a step needs D / 2 and both strides multiples of 8.
  CHECK(rope_plan(16, 512, 12, 64, 2, 768, 768, true).vec == 8);
  CHECK(rope_plan(16, 512, 12, 64, 2, 1152, 1152, true).vec == 8);  // q in the q/k/v rows
  CHECK(rope_plan(16, 512, 12, 64, 2, 768, 768, false).vec == 1);
  CHECK(rope_plan(16, 512, 12, 64, 2, 772, 768, true).vec == 1);
  CHECK(rope_plan(16, 512, 12, 64, 2, 768, 764, true).vec == 1);
  CHECK(rope_plan(2, 5, 3, 8, 2, 24, 24, true).vec == 1);  // 4 pairs a head
  // f32: 4 pairs a step.
  CHECK(rope_plan(2, 5, 3, 8, 4, 24, 24, true).vec == 4);
  CHECK(rope_plan(2, 5, 3, 8, 4, 40, 40, true).vec == 4);
  CHECK(rope_plan(2, 5, 3, 6, 4, 18, 18, true).vec == 1);
}

TEST_CASE("rope plan computes each angle once per batch group and fills its blocks") {
  // The seed preset's q and k on one device: one batch group, so T * D / 2 angles
  // a call where one thread per rotated pair computed B * H times as many.
  for (int64_t H : {12, 3}) {
    const RopePlan p = rope_plan(16, 512, H, 64, 2, H * 64, H * 64, true);
    CHECK(p.b_groups == 1);
    CHECK(p.pair_tiles == 1);
    CHECK(p.blocks == 512);
    CHECK(p.threads == std::min<int64_t>(256, 16 * H * 4));
  }
  // Many short rows: several groups, each of about kRopeItemsPerBlock steps.
  const RopePlan many = rope_plan(5000, 1, 1, 2, 4, 2, 2, true);
  CHECK(many.b_per_block == kRopeItemsPerBlock);
  CHECK(many.b_groups == 5);
  // A head of more pairs than one table holds: several tiles.
  CHECK(rope_plan(1, 1, 1, 2 * kRopePairTile + 2, 2, 0, 0, true).pair_tiles == 2);
}

TEST_CASE("rope plan launches nothing for empty shapes") {
  CHECK(rope_plan(0, 5, 3, 8, 2, 24, 24, true).blocks == 0);
  CHECK(rope_plan(2, 0, 3, 8, 2, 24, 24, true).blocks == 0);
  CHECK(rope_plan(2, 5, 0, 8, 2, 0, 0, true).blocks == 0);
  CHECK(rope_plan(2, 5, 3, 0, 2, 0, 0, true).blocks == 0);
  CHECK(rope_plan(2, 5, 3, 1, 2, 3, 3, true).blocks == 0);  // no pair
}
