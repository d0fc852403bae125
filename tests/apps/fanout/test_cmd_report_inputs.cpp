// `fanout report` on runs a careless or hostile user hands it, through the
// binary: losses of 0 and 5e-324 drawn with finite coordinates, a step past
// int64 refused, a long log making a small page, a damaged checkpoint named
// (never "no checkpoint"), and JSON nested 100,000 deep (a --bench file, a
// bench-*.json in the run, a metrics line) refused in one line naming the file.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');
// Bench output whose "mode" is nested 100,000 deep: the page's table prints it.
const std::string kDeepBench = "{\"results\":[{\"mode\":" + kDeep + ",\"tokens_per_s\":1}]}";

// A refusal: exit 1, one line naming `part`, no page.
void check_refused(const CliResult& r, const std::string& part, const std::string& page) {
  INFO("stderr: " << r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, part));
  CHECK_FALSE(fs::exists(page));
}
}  // namespace

TEST_CASE("report draws losses of 0 and 5e-324 with finite coordinates") {
  TempDir tmp("fanout-report-inputs");
  write(tmp / "tiny/metrics.jsonl",
        "{\"step\":1,\"loss\":5e-324}\n{\"step\":2,\"loss\":0}\n{\"step\":2,\"val_loss\":5e-324}\n"
        "{\"step\":3,\"loss\":5e-324}\n");
  CliResult r = run_fanout({"report", tmp / "tiny", "--out", tmp / "r.html"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  const std::string page = file_read(tmp / "r.html");
  CHECK(xml_problem(page) == "");
  CHECK_FALSE(has_non_finite_coordinate(page));
  CHECK_FALSE(has(page, "nan"));
}

TEST_CASE("report refuses a step past int64 in one line naming FILE:LINE") {
  TempDir tmp("fanout-report-inputs");
  write(tmp / "run/metrics.jsonl", "{\"step\":18446744073709551615,\"loss\":1}\n");
  check_refused(run_fanout({"report", tmp / "run", "--out", tmp / "r.html"}),
                tmp / "run/metrics.jsonl:1: \"step\" 18446744073709551615 is too large",
                tmp / "r.html");
}

TEST_CASE("report of a 100,000-step log is a small page") {
  TempDir tmp("fanout-report-inputs");
  std::string log;
  for (int s = 1; s <= 100000; ++s) {
    log += "{\"loss\":" + std::to_string(2.0 + (s % 10) * 0.01) +
           ",\"lr\":0.001,\"peak_bytes\":{\"cpu:0\":1048576,\"cpu:1\":1048576},\"step\":" +
           std::to_string(s) + ",\"tokens_per_s\":1000}\n";
  }
  write(tmp / "long/metrics.jsonl", log);
  CliResult r = run_fanout({"report", tmp / "long", "--out", tmp / "r.html"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  const std::string page = file_read(tmp / "r.html");
  CHECK(xml_problem(page) == "");
  CHECK(page.size() < 200000);  // every point drawn: over 10 MB
  CHECK(has(page, "steps 1-100000, final loss 2"));
}

TEST_CASE("report names a checkpoint whose trainer_state.json is damaged") {
  TempDir tmp("fanout-report-inputs");
  write(tmp / "run/metrics.jsonl", "{\"step\":1,\"loss\":2}\n");
  write(tmp / "run/final/trainer_state.json", "{\"version\": 1, \"step\": ");
  check_refused(run_fanout({"report", tmp / "run", "--out", tmp / "r.html"}),
                tmp / "run/final: trainer_state.json: not valid JSON", tmp / "r.html");
}

TEST_CASE("report names JSON nested 100,000 deep in one line: --bench, bench-*.json, metrics") {
  TempDir tmp("fanout-report-inputs");
  write(tmp / "run/metrics.jsonl", "{\"step\":1,\"loss\":2}\n");
  write(tmp / "deep.json", kDeepBench);
  const std::string page = tmp / "r.html";
  check_refused(run_fanout({"report", tmp / "run", "--bench", tmp / "deep.json", "--out", page}),
                tmp / "deep.json: JSON nested deeper than 512 levels", page);
  write(tmp / "run/bench-x.json", kDeepBench);
  check_refused(run_fanout({"report", tmp / "run", "--out", page}),
                tmp / "run/bench-x.json: JSON nested deeper than 512 levels", page);
  fs::remove(tmp / "run/bench-x.json");
  write(tmp / "run/metrics.jsonl", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"x\":" + kDeep + "}\n");
  check_refused(run_fanout({"report", tmp / "run", "--out", page}),
                tmp / "run/metrics.jsonl:2: JSON nested deeper than 512 levels", page);
}
