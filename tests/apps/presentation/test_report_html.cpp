// The report page: well formed and self-contained (nothing fetched), each run's
// curves, summary and settings from its newest checkpoint, trace and bench
// figures found in the run directory, every string from a file escaped; a
// damaged checkpoint, or a found file that is not JSON, is an error naming it.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/presentation/report_html.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout::presentation;
using fanout::test::count_of;
using fanout::test::error_of;
using fanout::test::has;
using fanout::test::xml_problem;

namespace {
namespace fs = std::filesystem;

const char* const kHostile = "<script>alert('x')</script>";

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

void write_checkpoint(const std::string& dir, int64_t step, const nlohmann::json& flags) {
  nlohmann::json state = {
      {"version", 1}, {"step", step},        {"data", {{"epoch", 0}, {"index", 4}}},
      {"seed", 1234}, {"tokens_seen", 4096}, {"flags", flags}};
  write(dir + "/trainer_state.json", state.dump(2));
  write(dir + "/config.json", R"({"hidden_size": 32, "model_type": "llama"})");
}

// A run directory: metrics for 4 steps, checkpoints at steps 2 and 4.
void make_run(const std::string& dir) {
  write(dir + "/metrics.jsonl",
        R"({"step":1,"loss":3.0,"lr":0.001,"tokens_per_s":100,"peak_bytes":{"cpu:0":1000}})"
        "\n"
        R"({"step":2,"loss":2.5,"lr":0.002,"tokens_per_s":110,"peak_bytes":{"cpu:0":1000}})"
        "\n"
        R"({"step":2,"val_loss":2.75})"
        "\n"
        R"({"step":4,"loss":2.0,"lr":0.001,"tokens_per_s":120,"peak_bytes":{"cpu:0":1000}})"
        "\n");
  write_checkpoint(dir + "/step-000002", 2, {{"strategy", "old"}});
  write_checkpoint(dir + "/step-000004", 4, {{"strategy", "zero1"}, {"data", kHostile}});
}

const char* const kTrace = R"({"traceEvents":[
  {"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"host"}},
  {"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"cpu:0 compute"}},
  {"ph":"X","name":"replicate","pid":1,"tid":1,"ts":0,"dur":100},
  {"ph":"X","name":"forward","pid":1,"tid":2,"ts":100,"dur":400},
  {"ph":"X","name":"backward <b>","pid":1,"tid":2,"ts":500,"dur":800}]})";

const char* const kBench = R"({"devices":"cpu:0,cpu:1","batch_size":8,"seq_len":64,"results":[
  {"mode":"dp","devices":"cpu:0,cpu:1","precision":"fp32","tokens_per_s":1000,"speedup":1.0,
   "step_s":0.5,"phases_s":{"forward":0.2,"backward":0.3},"peak_bytes":{"cpu:0":1048576}},
  {"mode":"<i>peer</i>","peer":true,"precision":"fp32","tokens_per_s":900}]})";
}  // namespace

TEST_CASE("report_html: curves, summary and the newest checkpoint's settings, escaped") {
  fanout::test::TempDir tmp("fanout-report");
  make_run(tmp / "run-a");
  ReportOptions o;
  o.runs = {tmp / "run-a"};
  const std::string page = report_html(o);
  CHECK(xml_problem(page) == "");
  CHECK(count_of(page, "<script") == 0);
  CHECK(has(page, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
  CHECK(has(page, "<span>zero1</span>"));  // step 4's settings, not step 2's
  CHECK_FALSE(has(page, "<span>old</span>"));
  CHECK(has(page, "final loss 2, held-out 2.75 (best 2.75 at step 2)"));
  CHECK(has(page, "<b>hidden_size</b><span>32</span>"));
  CHECK(count_of(page, "<svg") == 1);
  // Self-contained: nothing to fetch.
  for (const char* fetch : {"src=", "href='http", "href=\"http", "@import", "url(", "<link"})
    CHECK_MESSAGE(!has(page, fetch), fetch);
}

TEST_CASE("report_html shows a run's trace and bench files and the page's --bench files") {
  fanout::test::TempDir tmp("fanout-report");
  make_run(tmp / "a");
  make_run(tmp / "b");
  write(tmp / "a/trace.json", kTrace);
  write(tmp / "a/bench-modes.json", kBench);
  write(tmp / "b/trace-broken.json", "{\"traceEvents\": 3}");
  write(tmp / "page-bench.json", kBench);
  ReportOptions o;
  o.runs = {tmp / "a", tmp / "b"};
  o.labels = {"first <run>", "second"};
  o.bench_files = {tmp / "page-bench.json"};
  const std::string page = report_html(o);
  CHECK(xml_problem(page) == "");
  CHECK(has(page, "first &lt;run&gt;"));
  CHECK(has(page, "<h3>Trace: trace.json</h3>"));
  CHECK(has(page, "3 spans over 1.3 ms"));
  CHECK(has(page, "backward &lt;b&gt;"));
  CHECK(has(page, "not a Chrome trace (no &quot;traceEvents&quot; array)"));
  CHECK(count_of(page, "<h3>Bench: ") == 2);
  CHECK(has(page, "&lt;i&gt;peer&lt;/i&gt;"));
  CHECK(count_of(page, "<i>") == 0);
  // All runs overlaid, each run's curves, a trace picture, two bench pictures.
  CHECK(count_of(page, "<svg") == 6);
  CHECK(count_of(page, "<script") == 0);
}

TEST_CASE("report_html names what is wrong in one line") {
  fanout::test::TempDir tmp("fanout-report");
  make_run(tmp / "a");
  fs::create_directories(tmp / "empty");
  write(tmp / "bad-bench.json", R"({"results":[{"mode":"dp"}]})");
  ReportOptions o;
  o.runs = {tmp / "empty"};
  CHECK(error_of([&] { report_html(o); }) ==
        tmp / "empty" + ": no metrics.jsonl (not a fanout train run directory?)");
  o.runs = {tmp / "a"};
  o.labels = {"x", "y"};
  CHECK(error_of([&] { report_html(o); }) == "--labels has 2 names for 1 runs");
  o.labels = {};
  o.bench_files = {tmp / "bad-bench.json"};
  CHECK(error_of([&] { report_html(o); }) ==
        tmp / "bad-bench.json" + ": a result without \"mode\" and \"tokens_per_s\"");
  write(tmp / "a/metrics.jsonl", "{\"step\":1}\nnot json\n");
  o.bench_files = {};
  const std::string bad_line = error_of([&] { report_html(o); });
  CHECK(bad_line.rfind(tmp / "a/metrics.jsonl" + ":2: not valid JSON: ", 0) == 0);
  CHECK(report_run_settings(tmp / "empty", nullptr).is_null());
}

TEST_CASE("report_run_settings names a checkpoint that cannot be read") {
  fanout::test::TempDir tmp("fanout-report");
  make_run(tmp / "a");
  // No checkpoint at all: settings unknown, not an error.
  fs::remove_all(tmp / "a/step-000002");
  fs::remove_all(tmp / "a/step-000004");
  CHECK(report_run_settings(tmp / "a", nullptr).is_null());
  // A final/ whose trainer_state.json is damaged is an error naming it.
  write_checkpoint(tmp / "a/final", 4, {{"strategy", "dp"}});
  write(tmp / "a/final/trainer_state.json", "{\"version\": 1, \"step\": ");
  std::string err = error_of([&] { report_run_settings(tmp / "a", nullptr); });
  CHECK(has(err, tmp / "a/final"));
  CHECK(has(err, "trainer_state.json"));
  ReportOptions o;
  o.runs = {tmp / "a"};
  CHECK(error_of([&] { report_html(o); }) == err);
  // So is a step-N one, and a checkpoint's config.json that is not JSON.
  fs::remove_all(tmp / "a/final");
  write_checkpoint(tmp / "a/step-000004", 4, {{"strategy", "dp"}});
  write(tmp / "a/step-000004/trainer_state.json", "[");
  CHECK(has(error_of([&] { report_html(o); }), tmp / "a/step-000004/trainer_state.json"));
  write_checkpoint(tmp / "a/step-000004", 4, {{"strategy", "dp"}});
  write(tmp / "a/step-000004/config.json", "{\"hidden_size\": ");
  err = error_of([&] { report_html(o); });
  CHECK(err.rfind(tmp / "a/step-000004/config.json: not valid JSON: ", 0) == 0);
}

TEST_CASE("report_html names a trace or bench file in a run directory that is not JSON") {
  fanout::test::TempDir tmp("fanout-report");
  make_run(tmp / "a");
  ReportOptions o;
  o.runs = {tmp / "a"};
  write(tmp / "a/bench-x.json", std::string(100000, '[') + std::string(100000, ']'));
  CHECK(error_of([&] { report_html(o); }) ==
        tmp / "a/bench-x.json" + ": JSON nested deeper than 512 levels (at byte 512)");
  fs::remove(tmp / "a/bench-x.json");
  write(tmp / "a/trace.json", "{\"traceEvents\": [");
  CHECK(error_of([&] { report_html(o); }).rfind(tmp / "a/trace.json: not valid JSON: ", 0) == 0);
  // JSON of another shape may be another tool's file: it is named on the page.
  write(tmp / "a/trace.json", "{\"events\": []}");
  write(tmp / "a/bench-notes.json", "{\"notes\": \"mine\"}");
  const std::string page = report_html(o);
  CHECK(has(page, "not a Chrome trace"));
  CHECK(has(page, "not `fanout bench --json` output"));
}

TEST_CASE("report_html names trace times and bench figures too large to draw") {
  fanout::test::TempDir tmp("fanout-report");
  make_run(tmp / "a");
  // 1e300 µs cast to int64 was undefined and drew "-9200000000000000.0 ms".
  write(tmp / "a/trace.json",
        R"({"traceEvents":[{"ph":"X","name":"forward","tid":1,"ts":1e300,"dur":5},)"
        R"({"ph":"X","name":"backward","tid":1,"ts":0,"dur":4}]})");
  // A phase of 1e308 s summed to infinity and drew at x='-nan'.
  write(tmp / "a/bench-big.json",
        R"({"results":[{"mode":"dp","tokens_per_s":1000,"phases_s":{"forward":1e308}}]})");
  write(
      tmp / "a/bench-tiny.json",
      R"({"results":[{"mode":"dp","tokens_per_s":5e-324,"speedup":0,"phases_s":{"forward":5e-324}}]})");
  ReportOptions o;
  o.runs = {tmp / "a"};
  const std::string page = report_html(o);
  CHECK(xml_problem(page) == "");
  CHECK_FALSE(fanout::test::has_non_finite_coordinate(page));
  CHECK(has(page, "an &quot;X&quot; event&#39;s ts or dur is not a time in microseconds"));
  CHECK(has(page, "&quot;phases_s&quot;.&quot;forward&quot; 1e+308 is out of range"));
  CHECK(count_of(page, "<h3>Bench: ") == 2);
  CHECK(count_of(page, "not shown: ") == 2);  // the tiny figures are drawn
}
