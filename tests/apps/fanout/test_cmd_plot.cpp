// `fanout plot` through the binary: several runs overlaid with a legend entry
// each, errors in one line (a run without metrics.jsonl, a malformed line named
// FILE:LINE, --out in a missing folder, --labels and --metric mistakes); and
// `fanout train` leaving curves.svg in its run directory, also when interrupted.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/apps/fanout/train_util.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

// A run directory with `steps` logged steps on two devices and an evaluation every 5.
void make_run(const std::string& dir, int steps, double offset) {
  fs::create_directories(dir);
  std::ofstream out(dir + "/metrics.jsonl");
  for (int s = 1; s <= steps; ++s) {
    out << R"({"step":)" << s << R"(,"loss":)" << 5.0 - 0.05 * s + offset
        << R"(,"lr":0.001,"tokens_per_s":)" << 1000 + s
        << R"(,"peak_bytes":{"cpu:0":2000000,"cpu:1":1000000}})"
        << "\n";
    if (s % 5 == 0) out << R"({"step":)" << s << R"(,"val_loss":)" << 4.9 - 0.05 * s << "}\n";
  }
}
}  // namespace

TEST_CASE("plot overlays three runs with one legend entry each") {
  TempDir tmp("fanout-plot");
  for (const char* name : {"dp", "zero1", "ddp"}) make_run(tmp / name, 20, 0);
  CliResult r = run_fanout({"plot", tmp / "dp", tmp / "zero1", tmp / "ddp/", "--out",
                            tmp / "all.svg", "--metric", "loss"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "plot of 3 runs written to"));
  const std::string svg = read_text(tmp / "all.svg");
  CHECK(xml_problem(svg) == "");
  CHECK(count_of(svg, "<path") == 3);
  CHECK(texts_of_class(svg, "legend") == std::vector<std::string>{"dp", "zero1", "ddp"});

  r = run_fanout({"plot", tmp / "dp", tmp / "zero1", tmp / "ddp", "--out", tmp / "all.svg",
                  "--labels", "a,b,c"});
  REQUIRE(r.rc == 0);
  const std::string all = read_text(tmp / "all.svg");
  CHECK(xml_problem(all) == "");
  // loss + held-out, lr, tokens/s per run; memory per run and device
  CHECK(count_of(all, "<path") == 3 * 2 + 3 + 3 + 3 * 2);
  CHECK(texts_of_class(all, "legend")[0] == "a training");
}

TEST_CASE("plot errors are one line and write nothing") {
  TempDir tmp("fanout-plot");
  make_run(tmp / "good", 5, 0);
  fs::create_directories(tmp / "not-a-run");
  make_run(tmp / "bad", 3, 0);
  std::ofstream(tmp / "bad/metrics.jsonl", std::ios::app) << "{\"step\": 4, \"loss\": \n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{tmp / "good", tmp / "not-a-run"},
       tmp / "not-a-run" + ": no metrics.jsonl (not a fanout train run directory?)"},
      {{tmp / "bad"}, tmp / "bad/metrics.jsonl:4: not valid JSON"},
      {{tmp / "good", "--labels", "x,y"}, "--labels names 2 runs but 1 were given"},
      {{tmp / "good", "--labels", "x,,y"}, "--labels x,,y: an empty name"},
      {{tmp / "good", "--metric", "speed"}, "--metric speed: unknown"},
      {{tmp / "good", "--out", tmp / "missing/p.svg"}, "missing"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"plot"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    if (std::find(args.begin(), args.end(), "--out") == args.end())
      args.insert(args.end(), {"--out", tmp / "p.svg"});
    CliResult r = run_fanout(args);
    CAPTURE(c.message);
    INFO("stderr: " << r.err);
    CHECK(r.rc == 1);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, c.message));
    CHECK_FALSE(fs::exists(tmp / "p.svg"));
  }
  CliResult r = run_fanout({"plot", "--out", tmp / "p.svg"});
  CHECK(r.rc == 2);  // no run: a usage error
}

TEST_CASE("train leaves curves.svg in its run directory, also when stopped early") {
  TrainFiles f;
  TempDir tmp("fanout-plot-train");
  const std::string out = tmp / "run";
  CliResult r = train_cli({"--config", f.config, "--data", f.data, "--val-data", f.data,
                           "--devices", "cpu:0,cpu:1", "--batch-size", "4", "--seq-len", "16",
                           "--steps", "6", "--eval-every", "3", "--out", out});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "curves written to " + out + "/curves.svg"));
  const std::string svg = read_text(out + "/curves.svg");
  CHECK(xml_problem(svg) == "");
  // training + held-out loss, lr, tokens/s, one memory series per device
  CHECK(count_of(svg, "<path") == 6);
  CHECK(texts_of_class(svg, "legend") ==
        std::vector<std::string>{"training", "held-out", "run", "run", "cpu:0", "cpu:1"});
  CHECK_FALSE(has_non_finite_coordinate(svg));
  // curves.svg carries fanout's mark, so plot may redraw it (never the run's metrics).
  r = run_fanout({"plot", out, "--out", out + "/curves.svg", "--metric", "loss"});
  INFO("stderr: " << r.err);
  CHECK(r.rc == 0);
  CHECK(has(read_text(out + "/curves.svg"), "fanout runs: run"));  // plot's title, not train's

  // --json keeps stdout's last line JSON: curves are written without a message.
  const std::string json_out = tmp / "json";
  r = train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0", "--batch-size", "2",
                 "--seq-len", "16", "--steps", "2", "--out", json_out, "--json"});
  REQUIRE(r.rc == 0);
  CHECK_FALSE(has(r.out, "curves written"));
  CHECK(fs::exists(json_out + "/curves.svg"));

  // A run stopped by a NaN (a learning rate that overflows) still gets its curves.
  const std::string nan_out = tmp / "nan";
  r = train_cli({"--config", f.config,    "--data", f.data,    "--devices", "cpu:0", "--batch-size",
                 "2",        "--seq-len", "16",     "--steps", "20",        "--lr",  "1e6",
                 "--warmup", "0",         "--clip", "0",       "--out",     nan_out});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "stopped before updating the weights"));
  CHECK(fs::exists(nan_out + "/curves.svg"));
  CHECK_FALSE(has_non_finite_coordinate(read_text(nan_out + "/curves.svg")));
  // curves.svg is a run's own file: --resume auto still takes the directory (starts fresh).
  r = train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0", "--batch-size", "2",
                 "--seq-len", "16", "--steps", "2", "--resume", "auto", "--out", nan_out});
  CHECK(r.rc == 0);
  CHECK(r.err == "");
}
