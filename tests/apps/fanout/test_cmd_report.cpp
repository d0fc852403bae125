// `fanout report` through the binary: the page of a real training run (with its
// trace and a bench file) is written, its errors are one line, and headless
// Chromium renders it: the screenshot is a large picture of many colours and the
// rendered DOM holds the charts' SVG. Chromium runs under a timeout in a process
// group of its own that the test kills; no Chromium process is left behind.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/apps/fanout/chromium_util.h"
#include "tests/apps/fanout/train_util.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

// A short real run with a trace, as a user makes one.
void train_run(const TrainFiles& f, const std::string& out) {
  fs::create_directories(out);
  CliResult r = train_cli({"--config",     f.config,
                           "--data",       f.data,
                           "--val-data",   f.data,
                           "--devices",    "cpu:0,cpu:1",
                           "--batch-size", "4",
                           "--seq-len",    "16",
                           "--steps",      "8",
                           "--eval-every", "4",
                           "--save-every", "4",
                           "--out",        out,
                           "--trace",      out + "/trace.json"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
}

const char* const kBench = R"({"devices":"cpu:0,cpu:1","batch_size":8,"seq_len":64,"results":[
  {"mode":"dp","devices":"cpu:0,cpu:1","precision":"fp32","tokens_per_s":1000,"speedup":1.0,
   "step_s":0.5,"phases_s":{"forward":0.2,"backward":0.3},"peak_bytes":{"cpu:0":1048576}}]})";
}  // namespace

TEST_CASE("report of a trained run renders in headless Chromium") {
  TrainFiles f;
  TempDir tmp("fanout-report-cli");
  train_run(f, tmp / "run");
  std::ofstream(tmp / "bench.json") << kBench;
  CliResult r = run_fanout(
      {"report", tmp / "run", "--bench", tmp / "bench.json", "--out", tmp / "report.html"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "report of 1 run written to"));
  const std::string page = read_text(tmp / "report.html");
  CHECK(xml_problem(page) == "");
  CHECK(has(page, "<h3>Trace: trace.json</h3>"));
  CHECK(has(page, "<h3>Bench: bench.json</h3>"));
  CHECK(has(page, "from " + tmp / "run/final/trainer_state.json"));

  if (!chromium_ready()) return;
  const std::string url = "file://" + tmp / "report.html";
  const std::string png = tmp / "report.png";
  CHECK(chromium_run(tmp, {"--screenshot=" + png, "--window-size=1200,1600"}, url,
                     tmp / "shot.log") == 0);
  REQUIRE_MESSAGE(fs::exists(png), read_text(tmp / "shot.log"));
  CHECK(fs::file_size(png) > 20000);
  const PngStats stats = png_stats(tmp, png);
  CHECK(stats.width == 1200);
  CHECK(stats.height == 1600);
  CHECK(stats.colours >= 8);      // text, axes and several series colours
  CHECK(stats.non_white > 0.02);  // the charts drew, not a blank page
  CHECK(stats.non_white < 0.9);   // nor a page of one colour
  // The rendered DOM holds the curves' SVG: a path per series.
  CHECK(chromium_run(tmp, {"--dump-dom"}, url, tmp / "dom.log") == 0);
  const std::string dom = read_text(tmp / "dom.log");
  CHECK(count_of(dom, "<svg") >= 3);
  CHECK(count_of(dom, "class=\"series\"") + count_of(dom, "class='series'") >= 6);
  CHECK(chromium_left_running(tmp) == 0);
}

TEST_CASE("report errors are one line and write nothing") {
  TempDir tmp("fanout-report-cli");
  fs::create_directories(tmp / "empty");
  CliResult r = run_fanout({"report", tmp / "empty", "--out", tmp / "r.html"});
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "no metrics.jsonl"));
  r = run_fanout({"report", tmp / "empty", "--out", tmp / "missing/r.html"});
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  fs::create_directories(tmp / "run");
  std::ofstream(tmp / "run/metrics.jsonl") << "{\"step\":1,\"loss\":2}\n";
  r = run_fanout({"report", tmp / "run", "--bench", tmp / "none.json", "--out", tmp / "r.html"});
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "none.json"));
  CHECK_FALSE(fs::exists(tmp / "r.html"));
}
