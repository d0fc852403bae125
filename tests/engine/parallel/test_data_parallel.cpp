// The core invariant, for every parallel mode: N replicas on a split batch give
// the loss, gradients and AdamW updates of one device on the whole batch —
// uneven splits, padded rows with different counted-token totals per replica,
// small batches, another output device, device orders, explicit chunk sizes.

#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "engine/core/check.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::DataParallelOptions;
using parallel::LossOn;
using parallel::Strategy;

namespace {

const RunResult& reference(const TestBatch& batch) {
  static std::map<std::pair<int64_t, uint64_t>, RunResult> cache;
  uint64_t key = 0;
  for (int32_t t : batch.targets) key = key * 1000003 + static_cast<uint32_t>(t + 200);
  auto it = cache.find({batch.B, key});
  if (it == cache.end()) {
    DataParallelOptions o;
    o.device_ids = {cpu_device(0)};
    it = cache.emplace(std::make_pair(batch.B, key), run_data_parallel(o, batch)).first;
  }
  return it->second;
}

void check_equivalent(const RunResult& got, const RunResult& ref) {
  models::LlamaLayout layout(small_test_config());
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(got.losses[s] - ref.losses[s]) <= 1e-5 * std::abs(ref.losses[s]));
    CHECK(std::abs(got.grad_norms[s] - ref.grad_norms[s]) <= 1e-5 * ref.grad_norms[s]);
  }
  for (const models::ParamInfo& p : layout.params()) {
    std::vector<float> a(got.first_grads.begin() + p.offset,
                         got.first_grads.begin() + p.offset + p.numel);
    std::vector<float> b(ref.first_grads.begin() + p.offset,
                         ref.first_grads.begin() + p.offset + p.numel);
    CAPTURE(p.name);
    CHECK(rel_l2(a, b) <= 1e-5);
  }
  auto du = difference(got.final_params, got.init_params);
  auto dr = difference(ref.final_params, ref.init_params);
  CHECK(rel_l2(du, dr) <= 1e-3);
  CHECK(rel_l2(dr, std::vector<float>(dr.size(), 0.0f)) > 0);  // the reference moved
}

}  // namespace

TEST_CASE("every mode on 2 3 and 4 CPU devices equals one device on the whole batch") {
  // 10 padded rows: per-replica counted-token totals differ.
  TestBatch batch = make_batch(10, 8, 61, 11, {0, 3, 7, 1, 0, 5, 2, 8, 4, 6});
  const RunResult& ref = reference(batch);
  REQUIRE(ref.losses[2] < ref.losses[0]);  // training does something
  for (const ParallelMode& m : kParallelModes) {
    for (const char* devices : {"cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2", "cpu:0,cpu:1,cpu:2,cpu:3"}) {
      CAPTURE(m.name);
      CAPTURE(devices);
      check_equivalent(run_data_parallel(mode_options(m, devices), batch), ref);
    }
  }
}

TEST_CASE("five rows on two devices split 3 and 2 and equal one device in every mode") {
  TestBatch batch = make_batch(5, 8, 61, 12, {1, 0, 4, 2, 0});
  const RunResult& ref = reference(batch);
  for (const ParallelMode& m : kParallelModes) {
    CAPTURE(m.name);
    check_equivalent(run_data_parallel(mode_options(m, "cpu:0,cpu:1"), batch), ref);
  }
}

TEST_CASE("a batch of 2 on 4 devices uses two replicas and equals one device") {
  TestBatch batch = make_batch(2, 8, 61, 13, {3, 0});
  const RunResult& ref = reference(batch);
  for (const ParallelMode& m : kParallelModes) {
    CAPTURE(m.name);
    check_equivalent(run_data_parallel(mode_options(m, "cpu:0,cpu:1,cpu:2,cpu:3"), batch), ref);
  }
}

TEST_CASE(
    "output_device other than device_ids[0] and device order cpu:2 cpu:0 keep the invariant") {
  TestBatch batch = make_batch(6, 8, 61, 14, {0, 2, 0, 5, 1, 0});
  const RunResult& ref = reference(batch);
  for (const ParallelMode& m : kParallelModes) {
    CAPTURE(m.name);
    DataParallelOptions o = mode_options(m, "cpu:0,cpu:1");
    o.output_device = cpu_device(5);
    check_equivalent(run_data_parallel(o, batch), ref);
    check_equivalent(run_data_parallel(mode_options(m, "cpu:2,cpu:0"), batch), ref);
  }
}

TEST_CASE("explicit chunk sizes including an idle primary keep the invariant") {
  TestBatch batch = make_batch(5, 8, 61, 15, {2, 0, 1, 0, 3});
  const RunResult& ref = reference(batch);
  for (const ParallelMode& m : kParallelModes) {
    for (std::vector<int64_t> chunks : {std::vector<int64_t>{1, 4}, std::vector<int64_t>{0, 5}}) {
      CAPTURE(m.name);
      CAPTURE(chunks[0]);
      DataParallelOptions o = mode_options(m, "cpu:0,cpu:1");
      o.chunk_sizes = chunks;
      check_equivalent(run_data_parallel(o, batch), ref);
    }
  }
}

TEST_CASE("two replicas on one device equal one device") {
  TestBatch batch = make_batch(4, 8, 61, 16, {0, 1, 2, 3});
  const RunResult& ref = reference(batch);
  for (const ParallelMode& m : kParallelModes) {
    CAPTURE(m.name);
    check_equivalent(run_data_parallel(mode_options(m, "cpu:0,cpu:0"), batch), ref);
  }
}
