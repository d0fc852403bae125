// fanout bench's pipeline rows (pp-gpipe, pp-1f1b, pp-zb1): one stage per
// device, memory by kind per device, the bubble measured from a traced step next
// to the schedule's own, and a line per row saying both.

#include <doctest/doctest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/apps/fanout/bench_util.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using test::has;

TEST_CASE(
    "bench pp rows: stages, micro-batches, memory by kind and the bubble, measured and "
    "the schedule's") {
  test::TempDir dir("fanout-bench-pp");
  auto r = test::run_fanout({"bench",
                             "--devices",
                             "cpu:0,cpu:1",
                             "--modes",
                             "dp,pp-gpipe,pp-1f1b,pp-zb1",
                             "--batch-size",
                             "8",
                             "--seq-len",
                             "32",
                             "--steps",
                             "2",
                             "--warmup",
                             "1",
                             "--min-seconds",
                             "0",
                             "--precision",
                             "fp32",
                             "--wide",
                             "--json",
                             dir / "b.json"},
                            "timeout 120");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  REQUIRE(test::bench_results(dir / "b.json").size() == 5);  // the baseline, dp, 3 schedules
  std::map<std::string, nlohmann::json> by_mode = test::bench_rows_by_mode(dir / "b.json");
  CHECK(by_mode["dp"]["pipeline"].is_null());
  for (const char* mode : {"pp-gpipe", "pp-1f1b", "pp-zb1"}) {
    CAPTURE(mode);
    const nlohmann::json& row = by_mode[mode];
    REQUIRE(row["status"] == "ok");
    const nlohmann::json& pp = row["pipeline"];
    CHECK(pp["stages"] == 2);
    CHECK(pp["micro_batches"] == 4);
    const double measured = pp["bubble"].get<double>();
    CHECK(measured > 0);
    CHECK(measured < 1);
    const double schedule = pp["bubble_schedule"].get<double>();
    // (K - 1) / (M + K - 1) for gpipe and 1f1b, less for zero bubble.
    if (std::string(mode) == "pp-zb1")
      CHECK(schedule < 0.2 - 1e-9);
    else
      CHECK(schedule == doctest::Approx(0.2));
    CHECK(row["peak_bytes_by_kind"].size() == 2);  // one entry per device
    CHECK(has(r.out, std::string(mode) + ": 2 stages, 4 micro-batches: bubble"));
  }
  // 1f1b keeps min(K - s, M) = 2 micro-batches on stage 0, gpipe all 4.
  auto activations = [&](const char* mode) {
    return by_mode[mode]["peak_bytes_by_kind"][0]["activations"].get<int64_t>();
  };
  CHECK(activations("pp-1f1b") < activations("pp-gpipe"));
  CHECK(has(r.out, "pp rows: forward is the whole schedule"));
}

TEST_CASE("bench pp rows on one device run a one-stage pipeline, not dp under the row's name") {
  test::TempDir dir("fanout-bench-pp1");
  auto r = test::run_fanout(
      {"bench",  "--devices",     "cpu:0", "--modes",     "pp-1f1b", "--batch-size",
       "4",      "--seq-len",     "16",    "--steps",     "1",       "--warmup",
       "0",      "--min-seconds", "0",     "--precision", "fp32",    "--wide",
       "--json", dir / "b.json"},
      "timeout 120");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  const nlohmann::json row = test::bench_results(dir / "b.json")[1];
  REQUIRE(row["mode"] == "pp-1f1b");
  CHECK(row["pipeline"]["stages"] == 1);
  CHECK(row["pipeline"]["micro_batches"] == 2);
  CHECK(row["pipeline"]["bubble_schedule"] == 0.0);
  CHECK(has(r.out, "pp-1f1b: 1 stage, 2 micro-batches"));
}
