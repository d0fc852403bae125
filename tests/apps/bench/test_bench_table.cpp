// bench's table fitted to the terminal: at 80 columns the rows that print as each
// mode finishes and the step-time block after them stay within 80 columns (a
// failed row's reason wraps), at 60 the bytes per step move to that block, while
// --wide (width 0) keeps every column on one line; the ranking line names the modes whose step
// times overlap the fastest's and says nothing when the fastest stands clear.

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "apps/bench/bench_table.h"

using namespace fanout;
using namespace fanout::presentation;
using namespace fanout::bench;

namespace {
size_t widest(const std::string& text) {
  size_t most = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t w = 0;
    for (unsigned char c : line) w += (c & 0xC0) != 0x80;  // UTF-8 characters
    most = std::max(most, w);
  }
  return most;
}
int lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// A mode that ran: its step times (seconds), tokens for 1000-token steps, phases.
BenchResult ran(const std::string& mode, const std::string& precision,
                const std::vector<double>& steps) {
  BenchResult r;
  r.mode = mode, r.precision = precision;
  r.step = step_times_summarize(steps);
  r.step_s = r.step.median, r.tokens_per_s = 1000 / r.step_s;
  r.phases.forward = 0.0123, r.phases.backward = 0.0456;
  r.comm = {3 << 20, 3 << 20};
  r.peaks = {{"rank 0 cpu:0", 57 << 20, {}}, {"rank 1 cpu:1", 48 << 20, {}}};
  return r;
}
}  // namespace

TEST_CASE("bench's rows fit 80 columns, and --wide keeps every column on one line") {
  const std::vector<std::string> labels = {"1 device (cpu:0)", "PyTorch peer", "dp",
                                           "ddp (2 processes) bf16"};
  BenchResult dp = ran("ddp (2 processes)", "bf16", {0.050, 0.051, 0.052, 0.060});
  BenchResult failed;
  failed.mode = "dp", failed.failed =
                          "out of memory on cpu:0 (--device-memory 15.0 MiB): allocating 3.3 MiB "
                          "of optimizer with 12.1 MiB live needs 15.4 MiB";
  PeerRow peer{"PyTorch torch.compile, fp32", "fp32", "skipped",
               "--compile needs PyTorch >= 2.0 (this is 1.13.1)", 0};

  const BenchTable narrow = bench_table(labels, 80);
  const std::string text = bench_table_head(narrow) + bench_table_row(narrow, dp, 9000) +
                           bench_table_row(narrow, failed, 9000) +
                           bench_table_peer(narrow, peer, 9000) +
                           bench_phase_table(narrow, {dp, failed});
  CAPTURE(text);
  CHECK(widest(text) <= 80);
  // Median 51.5 ms, IQR 50.75-54.0 ms: ±3.2%.
  CHECK(text.find("ddp (2 processes) bf16    19417  \xc2\xb1"
                  "3.2%    2.16x    51.5   3.0 MiB   3.0 MiB\n") != std::string::npos);
  CHECK(text.find("\ndp                       failed  out of memory on cpu:0 (--device-memory "
                  "15.0\n") != std::string::npos);
  CHECK(text.find("\nPyTorch peer            skipped  PyTorch torch.compile, fp32: --compile "
                  "needs\n") != std::string::npos);
  // The breakdown in a block of its own; the failed row is not in it.
  CHECK(text.find("\nmode                   scatter replic. forward gather loss backw. reduce "
                  "optim.\nddp (2 processes) bf16     0.0     0.0    12.3    0.0  0.0   45.6"
                  "    0.0    0.0\n") != std::string::npos);

  // 60 columns: the bytes per step move to the block after the table.
  const BenchTable sixty = bench_table(labels, 60);
  const std::string head60 = bench_table_head(sixty), after = bench_phase_table(sixty, {dp});
  CHECK(widest(head60 + bench_table_row(sixty, dp, 9000) + after) <= 60);
  CHECK(head60.find("sent/step") == std::string::npos);
  CHECK(after.find("sent/step") != std::string::npos);
  CHECK(after.find("3.0 MiB") != std::string::npos);
  CHECK(text.find("bytes sent per step") == std::string::npos);  // at 80 the table had them

  const BenchTable wide = bench_table(labels, 0);
  const std::string head = bench_table_head(wide);
  CHECK(lines(head) == 1);
  size_t at = 0;
  for (const char* column : {"mode", "tokens/s", "spread", "speed-up", "step ms", "scatter",
                             "replic.", "forward", "gather", "loss", "backward", "reduce", "optim.",
                             "sent/step", "sums/step", "peak bytes per device"}) {
    CAPTURE(column);
    at = head.find(column, at);
    CHECK(at != std::string::npos);
  }
  const std::string row = bench_table_row(wide, dp, 9000);
  CHECK(lines(row) == 1);
  CHECK(row.find("rank 0 cpu:0 57.0 MiB, rank 1 cpu:1 48.0 MiB\n") != std::string::npos);
  CHECK(bench_phase_table(wide, {dp}).empty());  // the rows hold it
}

TEST_CASE("the ranking line names the modes whose step times overlap the fastest's") {
  std::vector<BenchResult> rows = {
      ran("1 device (cpu:0)", "fp32", {0.100, 0.101, 0.102, 0.103, 0.104}),
      ran("dp", "fp32", {0.060, 0.061, 0.062, 0.063, 0.064}),
      ran("dp-overlap", "fp32", {0.055, 0.058, 0.0605, 0.0615, 0.080}),  // IQR 58-61.5 ms
      ran("zero1", "fp32", {0.070, 0.071, 0.072, 0.073, 0.074}),
      ran("dp", "bf16", {0.030, 0.031, 0.032, 0.033, 0.034}),
      ran("zero1", "bf16", {0.040, 0.041, 0.042, 0.043, 0.044}),
  };
  // dp-overlap is fastest in fp32 but its middle half reaches into dp's.
  const std::string line = bench_ranking_line(rows, 0);
  CAPTURE(line);
  CHECK(lines(line) == 1);
  CHECK(line.find("too close to rank") == 0);
  CHECK(line.find(": fp32 dp-overlap ~ dp.") != std::string::npos);
  CHECK(line.find("bf16") == std::string::npos);  // dp stands clear there
  CHECK(line.find("zero1") == std::string::npos);
  CHECK(widest(bench_ranking_line(rows, 80)) <= 80);
  // A failed row is not ranked; with dp-overlap's spread gone, fp32 is clear too.
  rows[2].failed = "out of memory";
  CHECK(bench_ranking_line(rows, 80).empty());
  rows[2] = ran("dp-overlap", "fp32", {0.0605, 0.061, 0.0615, 0.062, 0.0625});  // 61-62 ms
  rows.push_back(ran("zero2", "bf16", {0.0305, 0.031, 0.0315, 0.032, 0.0325}));
  const std::string both = bench_ranking_line(rows, 0);
  CAPTURE(both);
  CHECK(both.find(": fp32 dp-overlap ~ dp; bf16 zero2 ~ dp.") != std::string::npos);
  CHECK(lines(both) == 1);
}
