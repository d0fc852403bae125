// A run's curves: the panels curves.svg holds, overlays of several runs (a legend
// entry per run), the summary line, and curves.svg written into a run directory.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "apps/presentation/run_curves.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout::presentation;
using fanout::test::count_of;
using fanout::test::error_of;
using fanout::test::texts_of_class;
using fanout::test::xml_problem;

namespace {
RunMetrics run_of(double offset, bool with_val = true) {
  RunMetrics m;
  for (int s = 1; s <= 20; ++s) {
    m.loss[s] = 5.0 - 0.1 * s + offset;
    m.lr[s] = 1e-3 * s / 20;
    m.tokens_per_s[s] = 1000 + 10 * s;
    m.peak_bytes["cpu:0"][s] = 1 << 20;
    m.peak_bytes["cpu:1"][s] = 1 << 19;
  }
  if (with_val) m.val_loss = {{10, 4.2 + offset}, {20, 3.3 + offset}};
  return m;
}
}  // namespace

TEST_CASE("curves of one run: loss with held-out, lr, tokens/s and one series per device") {
  const std::vector<LabeledRun> runs = {{"dp", run_of(0)}};
  const std::string svg = run_curves_svg("t", "", runs, curve_metrics_parse("all"));
  CHECK(xml_problem(svg) == "");
  // training + held-out, lr, tokens/s, cpu:0 + cpu:1
  CHECK(count_of(svg, "<path") == 6);
  CHECK(texts_of_class(svg, "legend") ==
        std::vector<std::string>{"training", "held-out", "dp", "dp", "cpu:0", "cpu:1"});
  CHECK(count_of(svg, "<circle") == 2);  // the evaluations are dotted
}

TEST_CASE("an overlay of three runs has a legend entry per run in each panel") {
  std::vector<LabeledRun> runs = {{"dp", run_of(0)}, {"zero1", run_of(0)}, {"ddp", run_of(0.01)}};
  for (const char* metric : {"loss", "val_loss", "lr", "tokens_per_s"}) {
    CAPTURE(metric);
    const std::string svg = run_curves_svg("t", "", runs, curve_metrics_parse(metric));
    CHECK(xml_problem(svg) == "");
    CHECK(count_of(svg, "<path") == 3);
    CHECK(texts_of_class(svg, "legend") == std::vector<std::string>{"dp", "zero1", "ddp"});
  }
  const std::string mem = run_curves_svg("t", "", runs, curve_metrics_parse("memory"));
  CHECK(count_of(mem, "<path") == 6);
  CHECK(texts_of_class(mem, "legend")[5] == "ddp cpu:1");
  // Coinciding runs stay visible: each later run is drawn thinner.
  const auto widths = fanout::test::attr_values(
      run_curves_svg("t", "", runs, curve_metrics_parse("lr")), "path", "stroke-width");
  REQUIRE(widths.size() == 3);
  CHECK(std::stod(widths[0]) > std::stod(widths[1]));
  CHECK(std::stod(widths[1]) > std::stod(widths[2]));
}

TEST_CASE("a run without evaluations adds no held-out entry to the combined loss panel") {
  const std::vector<LabeledRun> runs = {{"a", run_of(0, false)}, {"b", run_of(0)}};
  const auto panels = run_curves_panels(runs, curve_metrics_parse("all"));
  REQUIRE(panels.size() == 4);
  REQUIRE(panels[0].series.size() == 3);
  CHECK(panels[0].series[0].label == "a training");
  CHECK(panels[0].series[2].label == "b held-out");
  CHECK(panels[0].series[2].dashed);
}

TEST_CASE("curve_metrics_parse names the choices") {
  CHECK(curve_metrics_parse("all").size() == 5);
  CHECK(error_of([] { curve_metrics_parse("los"); }) ==
        "--metric los: unknown (choose loss, val_loss, lr, tokens_per_s, memory or all)");
}

TEST_CASE("run_curves_summary gives the final loss and the best held-out loss") {
  RunMetrics m = run_of(0);
  m.val_loss = {{5, 4.0}, {10, 3.5}, {15, 3.7}};
  CHECK(run_curves_summary(m) == "steps 1-20, final loss 3, held-out 3.7 (best 3.5 at step 10)");
  CHECK(run_curves_summary(RunMetrics{}) == "no steps logged");
}

TEST_CASE("run_curves_write leaves curves.svg in the run directory") {
  fanout::test::TempDir dir("fanout-curves");
  std::ofstream(dir / "metrics.jsonl") << R"({"step":1,"loss":3.0,"lr":0.001})"
                                       << "\n"
                                       << R"({"step":2,"loss":2.0,"lr":0.002})"
                                       << "\n"
                                       << R"({"step":2,"val_loss":2.5})"
                                       << "\n";
  CHECK(run_curves_write(dir.path) == dir / "curves.svg");
  std::ifstream in(dir / "curves.svg");
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(xml_problem(svg) == "");
  CHECK(count_of(svg, "final loss 2") == 1);
  // Only curves.svg was added (no temporary left behind).
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path)) ++files;
  CHECK(files == 2);
  CHECK(run_dir_label("runs/dp/") == "dp");
  CHECK(run_dir_label("/a/b/zero1") == "zero1");
}
