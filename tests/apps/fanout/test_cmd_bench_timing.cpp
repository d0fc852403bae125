// `fanout bench` times every mode step by step: at least --steps timed steps and
// --min-seconds of them (a few steps measure a moment of the machine's load, not
// the mode), the ddp row's ranks stopping together; the table and --json give the
// median step with its spread (the quartiles), and --min-seconds is a number in
// range like every flag.

#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using fanout::test::has;

namespace {
const std::string kTimeout = "timeout 120";
std::vector<std::string> timed_bench(const std::string& min_seconds) {
  return {"bench", "--devices",   "cpu:0,cpu:1", "--modes",       "dp,ddp",   "--batch-size",
          "2",     "--seq-len",   "4",           "--steps",       "3",        "--warmup",
          "1",     "--precision", "fp32",        "--min-seconds", min_seconds};
}
}  // namespace

TEST_CASE("bench times each mode over --steps and --min-seconds and reports the median spread") {
  test::TempDir dir("fanout-bench-timing");
  std::vector<std::string> args = timed_bench("1");
  args.insert(args.end(), {"--json", dir / "t.json"});
  auto r = test::run_fanout(args, kTimeout);
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "at least 3 steps and 1 s"));
  CHECK(has(r.out, " spread "));
  CHECK(has(r.out, "\xc2\xb1"));  // ±
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(dir / "t.json"));
  CHECK(doc["steps"] == 3);
  CHECK(doc["min_seconds"] == 1.0);
  REQUIRE(doc["results"].size() == 3);  // the baseline, dp, ddp
  for (const nlohmann::json& row : doc["results"]) {
    CAPTURE(row.dump());
    REQUIRE(row["status"] == "ok");
    // Steps of a few milliseconds: a second of them is more than 3 (ddp: every
    // rank ran as many, or the row would have hung).
    const int timed = row["timed_steps"].get<int>();
    CHECK(timed > 3);
    const double q1 = row["step_s_q1"], median = row["step_s"], q3 = row["step_s_q3"];
    CHECK(q1 <= median);
    CHECK(median <= q3);
    CHECK(row["spread"].get<double>() == doctest::Approx((q3 - q1) / (2 * median)));
    CHECK(row["tokens_per_s"].get<double>() * median == doctest::Approx(2 * 4));
  }
}

TEST_CASE("bench --min-seconds 0 times exactly --steps steps, bad values fail in one line") {
  test::TempDir dir("fanout-bench-timing");
  std::vector<std::string> args = timed_bench("0");
  args.insert(args.end(), {"--json", dir / "t.json"});
  auto r = test::run_fanout(args, kTimeout);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(dir / "t.json"));
  for (const nlohmann::json& row : doc["results"]) CHECK(row["timed_steps"] == 3);
  for (const std::string bad : {"", "-1", "nan", "inf", "1e9", "x"}) {
    CAPTURE(bad);
    auto b = test::run_fanout(timed_bench(bad), kTimeout);
    CHECK(b.rc == 2);
    CHECK(b.err_lines() == 1);
    CHECK(has(b.err, "--min-seconds"));
    CHECK(b.out.empty());
  }
}
