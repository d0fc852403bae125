// `fanout plot` on logs a careless or hostile user hands it, through the binary:
// losses of 0 and 5e-324 drawn with finite coordinates, a step past int64 and a
// line nested 100,000 deep refused in one line naming FILE:LINE, and a long log
// drawn small (thinned per pixel column) with its figures from every line.

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

void write_log(const std::string& dir, const std::string& text) {
  fs::create_directories(dir);
  std::ofstream(dir + "/metrics.jsonl") << text;
}
}  // namespace

TEST_CASE("plot draws losses of 0 and 5e-324 with finite coordinates") {
  TempDir tmp("fanout-plot-inputs");
  write_log(tmp / "tiny",
            "{\"step\":1,\"loss\":5e-324}\n{\"step\":2,\"loss\":0}\n"
            "{\"step\":3,\"loss\":5e-324,\"lr\":5e-324}\n{\"step\":4,\"lr\":5e-324}\n");
  CliResult r = run_fanout({"plot", tmp / "tiny", "--out", tmp / "p.svg"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  const std::string svg = file_read(tmp / "p.svg");
  CHECK(xml_problem(svg) == "");
  CHECK_FALSE(has_non_finite_coordinate(svg));
  CHECK_FALSE(has(svg, "nan"));
  // The loss and lr lines are drawn through every point (3 and 2 of them).
  int lines = 0;
  for (const std::string& d : attr_values(svg, "path", "d")) lines += count_of(d, "L");
  CHECK(lines == 2 + 1);
}

TEST_CASE("plot refuses a step past int64 in one line naming FILE:LINE") {
  TempDir tmp("fanout-plot-inputs");
  write_log(tmp / "run", "{\"step\":1,\"loss\":2}\n{\"step\":18446744073709551615,\"loss\":1}\n");
  CliResult r = run_fanout({"plot", tmp / "run", "--out", tmp / "p.svg"});
  INFO("stderr: " << r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, tmp / "run/metrics.jsonl:2: \"step\" 18446744073709551615 is too large"));
  CHECK_FALSE(fs::exists(tmp / "p.svg"));
}

TEST_CASE("plot names a metrics line nested 100,000 deep in one line") {
  TempDir tmp("fanout-plot-inputs");
  write_log(tmp / "run", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"x\":" + std::string(100000, '[') +
                             std::string(100000, ']') + "}\n");
  CliResult r = run_fanout({"plot", tmp / "run", "--out", tmp / "p.svg"});
  INFO("stderr: " << r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, tmp / "run/metrics.jsonl:2: JSON nested deeper than 512 levels"));
  CHECK_FALSE(fs::exists(tmp / "p.svg"));
}

TEST_CASE("plot of a 100,000-step log is a small SVG whose figures come from every line") {
  TempDir tmp("fanout-plot-inputs");
  std::string log;
  for (int s = 1; s <= 100000; ++s) {
    const double loss = s == 61234 ? 9.5 : 2.0 + (s % 10) * 0.01;
    log += "{\"grad_norm\":0.5,\"loss\":" + std::to_string(loss) +
           ",\"lr\":0.001,\"peak_bytes\":{\"cpu:0\":1048576},\"step\":" + std::to_string(s) +
           ",\"tokens_per_s\":1000}\n";
    if (s % 1000 == 0)
      log += "{\"step\":" + std::to_string(s) + ",\"val_loss\":" + std::to_string(3.0 - s * 1e-5) +
             "}\n";
  }
  write_log(tmp / "long", log);
  CliResult r = run_fanout({"plot", tmp / "long", "--out", tmp / "p.svg"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  const std::string svg = file_read(tmp / "p.svg");
  CHECK(xml_problem(svg) == "");
  CHECK(svg.size() < 200000);  // every point drawn: over 10 MB
  CHECK(has(svg, "steps 1-100000, final loss 2, held-out 2 (best 2 at step 100000)"));
  // The one-step spike is still drawn: the y axis reaches past 9.5.
  bool reaches = false;
  for (const std::string& t : texts_of_class(svg, "ytick")) reaches |= std::stod(t) >= 9.5;
  CHECK(reaches);
}
