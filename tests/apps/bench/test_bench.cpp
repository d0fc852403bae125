// bench_mode times each step after the warm-up, at least --steps of them and for
// at least --min-seconds, and reports the median with its quartiles.
// bench_mode's figures per mode: zero2 and zero3 parse and run, their losses are
// dp's, and each device's peak bytes per kind show what they shard (zero2 the
// gradients, zero3 the weights too) on 4 CPU devices of the tiny preset; the
// bytes they move match the units (zero3 gathers the layers twice). The memory
// table prints every kind and puts each mode's ratio to dp's primary on its
// largest device. Mode names mean what train's flags mean (dp-replicas: dp).

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "apps/bench/bench.h"
#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "models/llama_layout.h"

using namespace fanout;
using namespace fanout::presentation;
using namespace fanout::bench;

namespace {

const BenchResult& result(const std::vector<BenchResult>& rs, const std::string& mode) {
  for (const BenchResult& r : rs)
    if (r.mode == mode) return r;
  FAIL("no result for " << mode);
  return rs[0];
}

size_t kind_sum(const DevicePeak& p) {
  size_t s = 0;
  for (size_t b : p.by_tag) s += b;
  return s;
}

}  // namespace

TEST_CASE("bench mode names mean what train's flags mean: dp, dp-output, dp-replicas as dp") {
  auto one = [](const std::string& name) {
    std::vector<parallel::Mode> m = bench_modes_parse(name);
    REQUIRE(m.size() == 1);
    return m[0];
  };
  // dp: train's default --strategy dp, the loss on the replicas.
  const parallel::Mode dp = one("dp");
  CHECK(dp.name == "dp");
  CHECK(dp.strategy == parallel::Strategy::dp);
  CHECK(dp.loss_on == parallel::LossOn::replicas);
  CHECK(!dp.overlap);
  CHECK(parallel::mode_flags(dp) == "--strategy dp");
  // dp-output: --loss-on output, nn.DataParallel's placement.
  const parallel::Mode out = one("dp-output");
  CHECK(out.strategy == parallel::Strategy::dp);
  CHECK(out.loss_on == parallel::LossOn::output);
  CHECK(!out.overlap);
  CHECK(parallel::mode_flags(out) == "--strategy dp --loss-on output");
  // dp-replicas: another name for dp, never a row of its own.
  const parallel::Mode old = one("dp-replicas");
  CHECK(old.name == "dp");
  CHECK(old.loss_on == parallel::LossOn::replicas);
  CHECK(bench_modes_parse("dp,dp-replicas").size() == 1);
  CHECK(bench_modes_parse("dp-replicas,zero1,dp").size() == 2);
  const parallel::Mode overlap = one("dp-overlap");
  CHECK((overlap.loss_on == parallel::LossOn::replicas && overlap.overlap));
  CHECK(parallel::mode_flags(overlap) == "--strategy dp --overlap");
  // ddp: train's --strategy ddp, which overlaps by default, the loss on the replicas.
  const parallel::Mode ddp = one("ddp");
  CHECK((ddp.strategy == parallel::Strategy::dp && ddp.loss_on == parallel::LossOn::replicas));
  CHECK(ddp.overlap);
  for (const char* z : {"zero1", "zero2", "zero3"}) {
    CAPTURE(z);
    const parallel::Mode m = one(z);
    CHECK(parallel::strategy_name(m.strategy) == std::string(z));
    CHECK(m.loss_on == parallel::LossOn::replicas);
    CHECK(parallel::mode_flags(m) == std::string("--strategy ") + z);
  }
}

TEST_CASE("bench modes: all runs every mode once, an unknown name lists the valid ones") {
  std::vector<std::string> all;
  for (const parallel::Mode& b : bench_modes_parse("all")) all.push_back(b.name);
  CHECK(all == std::vector<std::string>{"dp", "dp-output", "dp-overlap", "zero1", "zero2", "zero3",
                                        "ddp", "pp-gpipe", "pp-1f1b", "pp-zb1", "tp", "pp-tp"});
  CHECK(parallel::mode_names() ==
        "dp, dp-output, dp-overlap, zero1, zero2, zero3, ddp, pp-gpipe, pp-1f1b, pp-zb1, tp, "
        "pp-tp");
  for (const char* bad : {"dp,zero4", "dp,,zero1", "DP", "all,dp", "dp-output-x"}) {
    CAPTURE(bad);
    try {
      bench_modes_parse(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("--modes: unknown mode '") != std::string::npos);
      CHECK(what.find("(choose from dp, dp-output, dp-overlap, zero1, zero2, zero3, ddp, "
                      "pp-gpipe, pp-1f1b, pp-zb1, tp, pp-tp, or all; dp-replicas is another name "
                      "for "
                      "dp)") != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  CHECK_THROWS_WITH_AS(bench_modes_parse(""), doctest::Contains("--modes is empty"), Error);
}

TEST_CASE("bench_mode times each step until both --steps and --min-seconds are met") {
  BenchSetup setup;
  setup.config = models::llama_preset("tiny");
  setup.devices = {cpu_device(0), cpu_device(1)};
  setup.batch_size = 2, setup.seq_len = 4, setup.warmup = 1;
  const parallel::Mode dp = bench_modes_parse("dp")[0];
  // --steps alone: exactly that many timed steps.
  setup.steps = 3, setup.min_seconds = 0;
  BenchResult r = bench_mode(setup, dp);
  CHECK(r.step.samples == 3);
  // Steps of a few milliseconds: half a second takes more than 3 of them.
  setup.min_seconds = 0.5;
  r = bench_mode(setup, dp);
  CHECK(r.step.samples > 3);
  CHECK(r.step.samples * r.step.max >= 0.5);
  // The figures come from the median step; the quartiles bound it.
  CHECK(r.step_s == r.step.median);
  CHECK(r.tokens_per_s == doctest::Approx(2 * 4 / r.step.median));
  CHECK(r.step.min <= r.step.q1);
  CHECK(r.step.q1 <= r.step.median);
  CHECK(r.step.median <= r.step.q3);
  CHECK(r.step.q3 <= r.step.max);
  const nlohmann::json j = bench_row_json(r, r.tokens_per_s, {r});
  CHECK(j["step_s"] == r.step.median);
  CHECK(j["step_s_q1"] == r.step.q1);
  CHECK(j["step_s_q3"] == r.step.q3);
  CHECK(j["timed_steps"] == r.step.samples);
  CHECK(j["spread"] == step_times_spread(r.step));
  CHECK(j["speedup"] == 1.0);
  CHECK_THROWS_WITH(
      [&] {
        setup.min_seconds = -1;
        bench_mode(setup, dp);
      }(),
      "--min-seconds must be 0 or more, got -1");
}

TEST_CASE("bench peaks per kind: zero2 shards the gradients, zero3 the weights, on 4 devices") {
  BenchSetup setup;
  setup.config = models::llama_preset("tiny");
  setup.devices = {cpu_device(0), cpu_device(1), cpu_device(2), cpu_device(3)};
  // One timed step in each mode: the same number of updates, so the same loss.
  setup.batch_size = 4, setup.seq_len = 8, setup.steps = 1, setup.warmup = 1;
  setup.min_seconds = 0;
  std::vector<BenchResult> rs;
  for (const parallel::Mode& m : bench_modes_parse("dp,zero1,zero2,zero3"))
    rs.push_back(bench_mode(setup, m));
  const models::LlamaLayout layout(setup.config);
  const size_t P = static_cast<size_t>(layout.total());
  const BenchResult &dp = result(rs, "dp"), &z1 = result(rs, "zero1");
  const BenchResult &z2 = result(rs, "zero2"), &z3 = result(rs, "zero3");
  for (const BenchResult& r : rs) {
    CAPTURE(r.mode);
    REQUIRE(r.peaks.size() == 4);
    CHECK(r.peaks[0].device == "cpu:0");  // --devices order: the primary first
    CHECK(r.last_loss == doctest::Approx(dp.last_loss).epsilon(1e-4));
    for (const DevicePeak& p : r.peaks) {
      CAPTURE(p.device);
      // Each kind peaks at most at the total; the total at most at their sum.
      for (size_t b : p.by_tag) CHECK(b <= p.peak_bytes);
      CHECK(p.peak_bytes <= kind_sum(p));
      CHECK(p.tag(MemTag::activations) > 0);
    }
  }
  const DevicePeak& primary = dp.peaks[0];
  CHECK(primary.tag(MemTag::params) >= P * 4);
  CHECK(primary.tag(MemTag::grads) >= P * 4);
  CHECK(primary.tag(MemTag::optimizer) >= 2 * P * 4);
  const size_t shard = P / 4 * 4;  // bytes of one fp32 shard (within an element)
  for (int d = 0; d < 4; ++d) {
    CAPTURE(d);
    // zero1: whole gradients everywhere, a quarter of the AdamW state.
    CHECK(z1.peaks[d].tag(MemTag::grads) >= P * 4);
    CHECK(z1.peaks[d].tag(MemTag::optimizer) < primary.tag(MemTag::optimizer) / 3);
    // zero2: its gradient shard plus the unit buffers in flight, never the whole buffer.
    CHECK(z2.peaks[d].tag(MemTag::grads) >= shard);
    CHECK(z2.peaks[d].tag(MemTag::grads) < primary.tag(MemTag::grads));
    CHECK(z2.peaks[d].tag(MemTag::params) >= P * 4);
    // zero3: the weights too.
    CHECK(z3.peaks[d].tag(MemTag::params) >= shard);
    CHECK(z3.peaks[d].tag(MemTag::params) < primary.tag(MemTag::params));
    CHECK(z3.peaks[d].tag(MemTag::grads) < primary.tag(MemTag::grads));
  }
  // The same gradient sums, cut per unit; zero3 gathers each unit in forward (a
  // device fetches the 3/4 it does not own) and the layers again in backward.
  CHECK(z2.comm.reduce == z1.comm.reduce);
  CHECK(z3.comm.reduce == z1.comm.reduce);
  const int64_t L = setup.config.num_hidden_layers;
  const int64_t layers = layout.layer(L - 1).end - layout.layer(0).begin;
  CHECK(z2.comm.replicate == 3 * static_cast<int64_t>(P) * 4);  // the update's all-gather
  CHECK(z3.comm.replicate == 3 * (static_cast<int64_t>(P) + layers) * 4);
  CHECK(bench_memory_ratio(dp, dp) == 1.0);
  CHECK(bench_memory_ratio(z3, dp) < bench_memory_ratio(z1, dp));
  CHECK(bench_memory_ratio(z1, dp) < 1.0);
}

TEST_CASE("the memory table shows each kind and the ratio on a mode's largest device") {
  auto peak = [](const std::string& device, size_t params, size_t total) {
    DevicePeak p{device, total, {}};
    p.by_tag[static_cast<int>(MemTag::params)] = params;
    p.by_tag[static_cast<int>(MemTag::comm)] = 7;
    return p;
  };
  BenchResult base, z3, bf16;
  base.mode = "dp";
  base.peaks = {peak("cpu:0", 4096, 8192), peak("cpu:1", 4096, 4096)};
  z3.mode = "zero3";
  z3.peaks = {peak("cpu:0", 1024, 2048), peak("cpu:1", 1024, 4096)};
  z3.host_bytes = 3 << 20;  // --offload optimizer: on the result's first row
  bf16.mode = "zero3", bf16.precision = "bf16";
  bf16.peaks = {peak("cpu:0", 512, 1024)};
  CHECK(bench_memory_baseline({z3, base}, "fp32") != nullptr);
  CHECK(bench_memory_baseline({z3, base}, "bf16") == nullptr);
  CHECK(bench_memory_ratio(z3, base) == 0.5);  // cpu:1's 4 KiB over cpu:0's 8 KiB
  std::string t = bench_memory_table({base, z3, bf16});
  CAPTURE(t);
  for (const char* kind : {"params", "grads", "optimizer", "activations", "comm", "total", "host"})
    CHECK(t.find(kind) != std::string::npos);
  CHECK(t.find("vs dp") != std::string::npos);
  // The ratio on the row of the largest device, with every kind's bytes before it.
  CHECK(t.find("dp                       cpu:0                4.0 KiB         0 B         0 B"
               "         0 B         7 B     8.0 KiB  1.00x         0 B\n") != std::string::npos);
  CHECK(t.find("zero3                    cpu:0                1.0 KiB         0 B         0 B"
               "         0 B         7 B     2.0 KiB            3.0 MiB\n") != std::string::npos);
  CHECK(t.find("                         cpu:1                1.0 KiB         0 B         0 B"
               "         0 B         7 B     4.0 KiB  0.50x\n") != std::string::npos);
  CHECK(t.find("zero3 bf16               cpu:0                  512 B") != std::string::npos);
  CHECK(t.find("1.0 KiB  -             0 B\n") != std::string::npos);  // no bf16 baseline
  CHECK(t.find("vs dp (fp32): a mode's largest device total / dp's cpu:0 total, 8.0 KiB") !=
        std::string::npos);
  CHECK(t.find("vs dp (bf16): no ratio, dp did not run in bf16") != std::string::npos);
}

TEST_CASE("device peaks round-trip through JSON with every kind") {
  DevicePeak p{"cpu:2", 100, {}};
  for (int k = 0; k < kNumMemTags; ++k) p.by_tag[k] = 10 + k;
  nlohmann::json j = device_peak_json(p);
  CHECK(j["device"] == "cpu:2");
  CHECK(j["bytes"] == 100);
  CHECK(j["params"] == p.tag(MemTag::params));
  CHECK(j["activations"] == p.tag(MemTag::activations));
  DevicePeak q = device_peak_from_json(j);
  CHECK(q.device == p.device);
  CHECK(q.peak_bytes == p.peak_bytes);
  CHECK(q.by_tag == p.by_tag);
  // A file from before the kinds: the total only.
  DevicePeak old = device_peak_from_json({{"device", "cpu:0"}, {"bytes", 5}});
  CHECK(old.peak_bytes == 5);
  CHECK(old.tag(MemTag::grads) == 0);
}
