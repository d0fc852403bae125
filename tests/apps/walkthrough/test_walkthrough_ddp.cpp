// The walkthrough's ddp figures: the ring all-reduce bytes per rank for given W and
// parameter counts (2(W-1)/W of the gradient bytes, each bucket rounded down as
// ProcessGroup::bytes_sent counts it), the buckets and rows of a step, and a ring
// schedule that leaves rank r with the sum of chunk r and then every rank with
// every chunk. The computed bytes equal what a real ddp step measures: ranks as
// threads of this process, each a bench_mode("ddp") over its own Gloo group.

#include <doctest/doctest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "apps/bench/bench.h"
#include "apps/walkthrough/walkthrough_ddp.h"
#include "models/llama_layout.h"
#include "tests/apps/walkthrough/walkthrough_util.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using namespace fanout::presentation;
using namespace fanout::walkthrough;
using namespace fanout::bench;
namespace rdzv = fanout::test::rdzv;

TEST_CASE("ring all-reduce bytes per rank: every piece but its own, then every piece but r+1's") {
  CHECK(walk::ring_all_reduce_bytes(460160, 4, 1, 0) == 0);
  for (int r : {0, 1}) CHECK(walk::ring_all_reduce_bytes(460160, 4, 2, r) == 1840640);  // = P*4
  CHECK(walk::ring_all_reduce_bytes(460160, 4, 4, 3) == 2760960);                       // 1.5 x P*4
  CHECK(walk::ring_all_reduce_bytes(460160, 4, 8, 5) == 3221120);  // 1.75 x P*4
  // 10 values over 3 ranks are pieces of 3, 3 and 4: 20 - 3 - 3, 20 - 3 - 4, 20 - 4 - 3.
  CHECK(walk::ring_all_reduce_bytes(10, 4, 3, 0) == 56);
  CHECK(walk::ring_all_reduce_bytes(10, 4, 3, 1) == 52);
  CHECK(walk::ring_all_reduce_bytes(10, 4, 3, 2) == 52);          // 160 in all: 2(W-1)/W x 40 x W
  CHECK(walk::ring_all_reduce_bytes(460160, 2, 2, 0) == 920320);  // bf16 sums: half
}

TEST_CASE("a ddp step's figures: rows, state per rank, buckets and bytes for given W and P") {
  // The walkthrough's model on its 2 devices: 8 buckets of 0.25 MiB, top first.
  WalkthroughDdp d = walk::ddp_step_compute(460160, 2, 5, 0.25);
  CHECK(d.world == 2);
  CHECK(d.grad_bytes == 1840640);
  CHECK(d.weight_bytes == 1840640);
  CHECK(d.optimizer_bytes == 3681280);
  CHECK(d.rows == std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 2}});
  REQUIRE(d.buckets.size() == 8);
  CHECK(d.buckets[0] == std::pair<int64_t, int64_t>{394624, 460160});
  CHECK(d.buckets[7] == std::pair<int64_t, int64_t>{0, 1408});
  CHECK(d.bucket_sent[0] == 262144);  // 65536 elements x 4 bytes, x 2*1/2
  CHECK(d.bucket_sent[7] == 5632);
  CHECK(d.sent_by_rank == std::vector<int64_t>{1840640, 1840640});
  CHECK(d.ring_formula == 1840640);
  CHECK(d.start_broadcast == 1840640);
  CHECK(d.host_sum_bytes == 24);

  // 3 ranks, 1000 parameters in buckets of 256 elements: pieces of 85, 85, 86 and 77, 77, 78.
  WalkthroughDdp u = walk::ddp_step_compute(1000, 3, 10, 256.0 * 4 / (1024 * 1024));
  CHECK(u.rows == std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 3}, {7, 3}});
  CHECK(u.buckets ==
        std::vector<std::pair<int64_t, int64_t>>{{744, 1000}, {488, 744}, {232, 488}, {0, 232}});
  CHECK(u.bucket_sent == std::vector<int64_t>{1368, 1368, 1368, 1240});  // rank 0's
  CHECK(u.sent_by_rank == std::vector<int64_t>{5344, 5328, 5328});
  CHECK(u.sent_total() == 16000);  // 2(W-1)/W x 4000 bytes x W
  CHECK(u.ring_formula == 5333);   // 16000/3: one ring over the whole buffer

  // One rank sends nothing; one bucket when it holds the whole buffer.
  WalkthroughDdp one = walk::ddp_step_compute(1000, 1, 4, 25.0);
  CHECK(one.sent_by_rank == std::vector<int64_t>{0});
  CHECK(one.start_broadcast == 0);
  CHECK(one.buckets.size() == 1);
  CHECK(one.rows == std::vector<std::pair<int64_t, int64_t>>{{0, 4}});
}

TEST_CASE("the ring schedule leaves rank r with chunk r's sum, then every rank with every chunk") {
  const std::vector<std::vector<walk::RingMove>> rs2 = walk::ring_reduce_scatter_steps(2);
  REQUIRE(rs2.size() == 1);
  REQUIRE(rs2[0].size() == 2);
  CHECK((rs2[0][0].from == 0 && rs2[0][0].to == 1 && rs2[0][0].chunk == 1));
  CHECK((rs2[0][1].from == 1 && rs2[0][1].to == 0 && rs2[0][1].chunk == 0));
  CHECK(walk::ring_reduce_scatter_steps(1).empty());
  for (int W = 1; W <= 5; ++W) {
    CAPTURE(W);
    // sums[r][c]: the set of ranks whose chunk c has been added into rank r's chunk c.
    std::vector<std::vector<std::set<int>>> sums(W, std::vector<std::set<int>>(W));
    for (int r = 0; r < W; ++r)
      for (int c = 0; c < W; ++c) sums[r][c] = {r};
    const auto rs = walk::ring_reduce_scatter_steps(W);
    CHECK(rs.size() == static_cast<size_t>(W - 1));
    for (const auto& step : rs) {
      auto before = sums;  // every send of a step leaves at once
      std::vector<int> sent(W, 0);
      for (const walk::RingMove& m : step) {
        CHECK(m.to == (m.from + 1) % W);
        ++sent[m.from];
        for (int k : before[m.from][m.chunk]) sums[m.to][m.chunk].insert(k);
      }
      for (int s : sent) CHECK(s == 1);  // one chunk per rank per step
    }
    for (int r = 0; r < W; ++r) CHECK(sums[r][r].size() == static_cast<size_t>(W));
    // All-gather: has[r][c], whether rank r holds the whole sum of chunk c.
    std::vector<std::vector<bool>> has(W, std::vector<bool>(W, false));
    for (int r = 0; r < W; ++r) has[r][r] = true;
    for (const auto& step : walk::ring_all_gather_steps(W)) {
      auto before = has;
      for (const walk::RingMove& m : step) {
        CHECK(before[m.from][m.chunk]);  // only a complete sum is passed on
        has[m.to][m.chunk] = true;
      }
    }
    for (int r = 0; r < W; ++r)
      for (int c = 0; c < W; ++c) CHECK(has[r][c]);
  }
}

TEST_CASE("the computed ddp bytes are what a real ddp step's ranks send, for 2 and 3 ranks") {
  for (int W : {2, 3}) {
    CAPTURE(W);
    rdzv::Job job(W, W);
    std::vector<std::unique_ptr<distributed::ProcessGroup>> groups = rdzv::gloo_groups(job, 30);
    BenchSetup setup;
    setup.config = walkthrough_config();
    setup.batch_size = 5, setup.seq_len = 8, setup.steps = 2, setup.warmup = 1;
    setup.bucket_mb = 0.25;
    std::vector<BenchResult> results(static_cast<size_t>(W));
    rdzv::on_every_rank(W, [&](int r) {
      BenchSetup mine = setup;
      mine.devices = {cpu_device(r)};
      mine.ddp.enabled = true, mine.ddp.rank = r, mine.ddp.world = W;
      mine.group = groups[r].get();
      results[r] = bench_mode(mine, bench_modes_parse("ddp")[0]);
    });
    const int64_t P = models::LlamaLayout(setup.config).total();
    const WalkthroughDdp d = walk::ddp_step_compute(P, W, setup.batch_size, setup.bucket_mb);
    CHECK(d.buckets.size() > 1);
    for (const BenchResult& r : results) {
      CHECK(r.comm.reduce == d.sent_by_rank[&r - results.data()]);  // ProcessGroup::bytes_sent
      CHECK(r.comm.replicate == 0);                                 // no step broadcasts weights
    }
    CHECK(results[0].last_loss == results[W - 1].last_loss);
  }
}

TEST_CASE("the ddp narration quotes the step's figures") {
  WalkthroughOptions o;
  o.devices = {cpu_device(0), cpu_device(1), cpu_device(2)};
  o.batch_size = 5;
  const int64_t P = 460160;
  WalkthroughDdp d = walk::ddp_step_compute(P, 3, 5, o.bucket_mb);
  std::ostringstream text;
  walk::ddp_narrate(o, d, {}, 7, text);
  const std::string flat = test::unwrapped(text.str());
  CAPTURE(flat);
  auto has = [&](const std::string& what) { return flat.find(what) != std::string::npos; };
  CHECK(has("7. ddp: one process per device"));
  CHECK(has("fanout launch --nproc-per-node 3 -- train --strategy ddp"));
  CHECK(has("First computed"));
  CHECK(has("r0 rows [0, 2), r1 rows [2, 4), r2 rows [4, 5)"));
  CHECK(has("its own AdamW m and v (3681280 bytes, 2*P*4)"));
  // 7 buckets of 65536 elements (pieces of 21845, 21845, 21846) and one of 1408 (469, 469, 470).
  CHECK(d.sent_by_rank ==
        std::vector<int64_t>{7 * 349528 + 7512, 7 * 349524 + 7508, 7 * 349524 + 7508});
  CHECK(
      has("per step: r0 2454208, r1 2454176, r2 2454176 bytes sent and as many received, "
          "against 2(W-1)/W x 1840640 gradient bytes = 2*2/3 x 1840640 = 2454186 for one ring "
          "over the whole buffer (a rank sends every piece of a bucket but its own, then every "
          "piece but rank r+1's, and the pieces differ by up to one value)"));
  // The worked example: bucket #0's chunks and the ring's moves for W = 3.
  CHECK(has("W-1 = 2 steps each"));
  CHECK(
      has("c0 [394624, 416469) 87380 bytes, c1 [416469, 438314) 87380 bytes, c2 [438314, "
          "460160) 87384 bytes"));
  CHECK(has("reduce-scatter step 1: r0 -> r1 c2, r1 -> r2 c0, r2 -> r0 c1"));
  CHECK(has("reduce-scatter step 2: r0 -> r1 c1, r1 -> r2 c2, r2 -> r0 c0"));
  CHECK(has("all-gather step 1: r0 -> r1 c0, r1 -> r2 c1, r2 -> r0 c2"));
  CHECK(has("No logits or outputs are gathered"));
}
