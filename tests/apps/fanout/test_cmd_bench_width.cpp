// `fanout bench` and `fanout walkthrough` fit the terminal: off a terminal (no
// COLUMNS) every line is at most 80 characters wide (counted as characters, not
// UTF-8 bytes: "±" is one), with COLUMNS at most that many, and --wide keeps the
// full form: bench's row of every column, one line per mode, the walkthrough's
// tables whole.

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using fanout::test::has;

namespace {
const std::string kTimeout = "timeout 180";
// No COLUMNS from whoever runs the suite: stdout is a file, so 80.
const std::string kNoColumns = "env -u COLUMNS " + kTimeout;

// The lines of `text` wider than `width` characters, each with its width.
std::string wider_than(const std::string& text, size_t width) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t w = 0;
    for (unsigned char c : line) w += (c & 0xC0) != 0x80;  // UTF-8 lead bytes
    if (w > width) out += std::to_string(w) + ": " + line + "\n";
  }
  return out;
}
// The first line of `text` holding every one of `words`, in order ("" if none).
std::string line_with(const std::string& text, const std::vector<std::string>& words) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t at = 0;
    bool all = true;
    for (const std::string& w : words) {
      at = line.find(w, at);
      if (at == std::string::npos) {
        all = false;
        break;
      }
      at += w.size();
    }
    if (all) return line;
  }
  return "";
}
// The modes in fp32 and bf16 on two CPU devices, two tiny steps each.
std::vector<std::string> bench(const std::vector<std::string>& more) {
  std::vector<std::string> args = {
      "bench", "--devices", "cpu:0,cpu:1", "--batch-size", "2", "--seq-len", "4", "--steps", "2"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}
}  // namespace

TEST_CASE("bench fits 80 columns off a terminal, COLUMNS when set, --wide keeps every column") {
  test::TempDir dir("fanout-bench-width");
  // The longest labels, and flags the bench has long had (its default timing).
  auto r = test::run_fanout(
      bench({"--modes", "dp-output,zero3,ddp", "--mfu", "--kernels", "--json", dir / "b.json"}),
      kNoColumns);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(wider_than(r.out, 80) == "");
  CHECK(has(r.out, "ddp (2 processes) bf16"));     // every mode ran
  CHECK(has(r.out, "ms per step by phase"));       // the breakdown, in a block of its own
  CHECK(has(r.out, "kernel ops, 1 device bf16"));  // the --kernels lines, wrapped
  // A failed row's reason wraps too.
  auto f = test::run_fanout(bench({"--modes", "dp,zero3", "--precision", "fp32", "--device-memory",
                                   "15MiB", "--min-seconds", "0"}),
                            kNoColumns);
  CHECK(f.rc == 1);
  CHECK(wider_than(f.out, 80) == "");
  CHECK(has(f.out, "\ndp "));
  CHECK(has(f.out, " failed  out of memory on cpu:0"));
  // The terminal's width when COLUMNS gives one.
  for (const std::string columns : {"60", "100"}) {
    CAPTURE(columns);
    auto c = test::run_fanout(bench({"--modes", "dp,ddp", "--min-seconds", "0"}),
                              "COLUMNS=" + columns + " " + kTimeout);
    CHECK(c.rc == 0);
    CHECK(wider_than(c.out, std::stoul(columns)) == "");
  }

  auto w = test::run_fanout(bench({"--wide", "--min-seconds", "0"}), kNoColumns);
  REQUIRE(w.rc == 0);
  CHECK(wider_than(w.out, 80) != "");
  // Every column the table had, in one line.
  CHECK(line_with(w.out, {"mode", "tokens/s", "speed-up", "step ms", "scatter", "replic.",
                          "forward", "gather", "loss", "backward", "reduce", "optim.", "sent/step",
                          "sums/step", "peak bytes per device"}) != "");
  CHECK(line_with(w.out, {"mode", "device", "params", "grads", "optimizer", "activations", "comm",
                          "total", "vs dp"}) != "");
  // One line per mode, with each device's peak bytes.
  for (const std::string mode : {"dp-overlap bf16", "zero3 ", "ddp (2 processes) bf16"}) {
    CAPTURE(mode);
    CHECK(line_with(w.out, {mode, "x ", "MiB", "cpu:0 ", "MiB, ", "cpu:1 ", "MiB"}) != "");
  }
}

TEST_CASE("the walkthrough fits 80 columns off a terminal, --wide keeps its tables whole") {
  test::TempDir dir("fanout-walkthrough-width");
  auto r = test::run_fanout({"walkthrough", "--trace", dir / "t.json"}, kNoColumns);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(wider_than(r.out, 80) == "");
  CHECK(has(r.out, "legend:"));
  auto c = test::run_fanout({"walkthrough", "--trace", dir / "t.json"}, "COLUMNS=60 " + kTimeout);
  REQUIRE(c.rc == 0);
  CHECK(wider_than(c.out, 60) == "");

  auto w = test::run_fanout({"walkthrough", "--wide", "--trace", dir / "t.json"}, kNoColumns);
  REQUIRE(w.rc == 0);
  CHECK(wider_than(w.out, 80) != "");
  CHECK(line_with(w.out, {"device", "params", "grads", "optimizer", "activations", "comm", "data",
                          "total"}) != "");
  CHECK(line_with(w.out, {"mode", "median", "IQR", "min-max", "peak", "params", "grads",
                          "optimizer", "comm"}) != "");
  CHECK(line_with(w.out, {"legend:", "S scatter", "R reduce", ". idle"}) != "");
}
