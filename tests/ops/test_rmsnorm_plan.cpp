// RMSNorm's CUDA backward plan (ops/rmsnorm_plan.h) on any machine: when it takes
// one pass over the rows, how its rows split into blocks of partial sums (each row
// in exactly one, a bounded number of partials), and that a warp's lanes cover
// every channel of a one-pass row exactly once.

#include <doctest/doctest.h>

#include <vector>

#include "ops/rmsnorm_plan.h"

using namespace fanout::ops;

TEST_CASE(
    "rmsnorm backward takes one pass for aligned rows of at most 1024 channels, 8 at a time") {
  for (int64_t C : {8, 64, 256, 264, 768, 1024}) {
    CAPTURE(C);
    const RmsnormGradPlan p = rmsnorm_grad_plan(100, C, true);
    CHECK(p.one_pass);
    CHECK(p.groups == (C + 255) / 256);
    CHECK(!rmsnorm_grad_plan(100, C, false).one_pass);
  }
  for (int64_t C : {1, 7, 1004, 1032, 2048, 4096}) {
    CAPTURE(C);
    CHECK(!rmsnorm_grad_plan(100, C, true).one_pass);
  }
  CHECK(rmsnorm_grad_plan(0, 768, true).partials == 0);
  CHECK(rmsnorm_grad_plan(5, 0, true).partials == 0);
}

TEST_CASE("rmsnorm backward plan puts every row in exactly one block of partial sums") {
  for (int64_t N : {1, 7, 8, 9, 64, 65, 257, 2048, 2049, 4097, 8192, 100000}) {
    for (int64_t C : {3, 768, 2048}) {
      for (bool aligned : {true, false}) {
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(aligned);
        const RmsnormGradPlan p = rmsnorm_grad_plan(N, C, aligned);
        REQUIRE(p.rows_per_block >= 1);
        // Blocks [k rpb, (k + 1) rpb) for k < partials cover [0, N), none empty.
        CHECK(p.partials * p.rows_per_block >= N);
        CHECK((p.partials - 1) * p.rows_per_block < N);
        if (p.one_pass) {
          CHECK(p.rows_per_block % kRmsnormRowWarps == 0);
          CHECK(p.partials <= kRmsnormOnePassBlocks);
        } else {
          CHECK(p.partials <= kRmsnormTwoPassChunks);
        }
      }
    }
  }
  // The seed preset at 16 x 512 on one device: 256 blocks of 32 rows.
  const RmsnormGradPlan seed = rmsnorm_grad_plan(8192, 768, true);
  CHECK(seed.one_pass);
  CHECK(seed.groups == 3);
  CHECK(seed.rows_per_block == 32);
  CHECK(seed.partials == 256);
}

TEST_CASE("rmsnorm one pass: a warp's lanes cover each channel of a row exactly once") {
  for (int64_t C : {8, 136, 256, 264, 768, 1016, 1024}) {
    CAPTURE(C);
    const RmsnormGradPlan p = rmsnorm_grad_plan(1, C, true);
    REQUIRE(p.one_pass);
    std::vector<int> count(C, 0);
    for (int lane = 0; lane < 32; ++lane)
      for (int g = 0; g < p.groups; ++g) {
        const int64_t c = (lane + int64_t(g) * 32) * 8;  // the kernel's first channel
        if (c >= C) continue;
        REQUIRE(c + 8 <= C);
        for (int k = 0; k < 8; ++k) ++count[c + k];
      }
    int64_t wrong = 0;
    for (int n : count) wrong += n != 1;
    CHECK(wrong == 0);
  }
}
