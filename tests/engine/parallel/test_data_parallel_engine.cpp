// DataParallel mechanics: how batches split, a failing device surfacing by name
// without a hang (and the engine working on), and where the memory goes.

#include <doctest/doctest.h>

#include <atomic>

#include "apps/train/optimizer.h"
#include "engine/core/check.h"
#include "models/llama_model.h"
#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::DataParallel;
using parallel::DataParallelOptions;

namespace {
std::unique_ptr<DataParallel> make_dp(DataParallelOptions o) {
  models::LlamaConfig config = small_test_config();
  std::vector<Device> ids = o.device_ids;
  auto factory = [config, ids](Device d, int i) {
    auto m =
        std::make_unique<models::LlamaModel>(config, d, parallel::replica_lane(ids, i, "compute"));
    m->init_random(7);
    return m;
  };
  return std::make_unique<DataParallel>(factory, o);
}
}  // namespace

TEST_CASE("split gives 3 3 2 2 for 10 rows on 4 devices and idles replicas for small batches") {
  DataParallelOptions o;
  o.device_ids = devices_parse("cpu:0,cpu:1,cpu:2,cpu:3");
  o.loss_on = parallel::LossOn::replicas;
  auto dp = make_dp(o);
  CHECK(dp->split(10) == std::vector<int64_t>{3, 3, 2, 2});
  CHECK(dp->split(9) == std::vector<int64_t>{3, 2, 2, 2});
  CHECK(dp->split(2) == std::vector<int64_t>{1, 1, 0, 0});
  CHECK(dp->split(0) == std::vector<int64_t>{0, 0, 0, 0});  // a ddp rank may get no rows
  CHECK_THROWS_AS(dp->split(-1), Error);
  o.chunk_sizes = {1, 3, 3, 3};
  auto lighter = make_dp(o);
  CHECK(lighter->split(10) == std::vector<int64_t>{1, 3, 3, 3});
  CHECK_THROWS_WITH_AS(lighter->split(9), doctest::Contains("add up to 10 rows"), Error);
}

TEST_CASE("a device that throws mid-step is named and the next step still works") {
  TestBatch batch = make_batch(6, 8, 61, 21, {0, 1, 2, 0, 3, 0});
  for (auto loss_on : {parallel::LossOn::output, parallel::LossOn::replicas}) {
    for (bool overlap : {false, true}) {
      for (const char* phase : {"forward", "backward"}) {
        CAPTURE(overlap);
        CAPTURE(phase);
        DataParallelOptions o;
        o.device_ids = devices_parse("cpu:0,cpu:1,cpu:2");
        o.loss_on = loss_on;
        o.overlap = overlap;
        o.bucket_mb = 0.02;
        std::atomic<bool> fail{true};
        std::string want = phase;
        o.fault_hook = [&](int replica, const std::string& p) {
          if (fail && replica == 1 && p == want) throw Error("injected fault");
        };
        auto dp = make_dp(o);
        dp->zero_grad();
        CHECK_THROWS_WITH_AS(
            dp->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted()),
            doctest::Contains("cpu:1"), Error);
        fail = false;
        dp->zero_grad();
        parallel::LossStats st =
            dp->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted());
        dp->reduce_gradients();
        CHECK(st.count == batch.counted());
        // The same step on one device gives the same loss: the engine recovered.
        DataParallelOptions one;
        one.device_ids = {cpu_device(0)};
        one.loss_on = parallel::LossOn::replicas;
        auto ref = make_dp(one);
        ref->zero_grad();
        parallel::LossStats rs =
            ref->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted());
        CHECK(std::abs(st.loss_sum - rs.loss_sum) <= 1e-5 * std::abs(rs.loss_sum));
      }
    }
  }
}

TEST_CASE("faithful dp gathers logits on the primary and zero1 splits optimizer state") {
  TestBatch batch = make_batch(8, 16, 61, 22);
  int64_t logits_bytes = 8 * 16 * 61 * 4;
  // Fresh device indices: allocator statistics are per device for the process.
  auto measure = [&](const char* devices, parallel::Strategy s, parallel::LossOn l) {
    DataParallelOptions o;
    o.device_ids = devices_parse(devices);
    o.strategy = s;
    o.loss_on = l;
    auto dp = make_dp(o);
    models::LlamaLayout layout(small_test_config());
    ops::AdamWConfig adam;
    train::Optimizer opt(*dp, train::decay_runs(layout), adam);
    dp->zero_grad();
    dp->forward_backward(batch.host(), models::kIgnoreIndex, batch.counted());
    dp->reduce_gradients();
    opt.step(1, 1e-3f, 1.0);
    std::vector<AllocatorStats> stats;
    for (int r = 0; r < dp->size(); ++r) stats.push_back(dp->memory(r));
    return stats;
  };
  int64_t P = models::LlamaLayout(small_test_config()).total();
  auto faithful = measure("cpu:30,cpu:31", parallel::Strategy::dp, parallel::LossOn::output);
  CHECK(faithful[0].tag(MemTag::comm).peak >= static_cast<size_t>(logits_bytes));
  CHECK(faithful[1].tag(MemTag::comm).peak < static_cast<size_t>(logits_bytes));
  CHECK(faithful[0].tag(MemTag::optimizer).live >= static_cast<size_t>(2 * P * 4));
  CHECK(faithful[1].tag(MemTag::optimizer).live == 0);
  auto replicas = measure("cpu:32,cpu:33", parallel::Strategy::dp, parallel::LossOn::replicas);
  // Both reduce through the same staging buffer; only faithful dp adds the logits.
  CHECK(faithful[0].tag(MemTag::comm).peak >=
        replicas[0].tag(MemTag::comm).peak + static_cast<size_t>(logits_bytes));
  auto zero1 =
      measure("cpu:34,cpu:35,cpu:36,cpu:37", parallel::Strategy::zero1, parallel::LossOn::replicas);
  for (const auto& s : zero1) {
    // m and v for a quarter of the parameters, plus a 4-byte norm scratch.
    CHECK(s.tag(MemTag::optimizer).live <= static_cast<size_t>(2 * (P / 4 + 1) * 4 + 4));
    CHECK(s.tag(MemTag::optimizer).live >= static_cast<size_t>(2 * (P / 4) * 4));
  }
}
