// The ASCII timeline: lanes in host / per-device order, one letter per phase,
// the shortest span winning a shared column, and the time axis.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "apps/presentation/trace_timeline.h"

using namespace fanout;
using namespace fanout::presentation;

TEST_CASE("timeline lanes put host first then devices by index and role") {
  std::vector<TraceSpan> spans = {
      {"cpu:1 compute", "forward", 0, 1}, {"cpu:10 comm", "reduce", 0, 1},
      {"cpu:0 comm", "reduce", 0, 1},     {"host", "replicate", 0, 1},
      {"cpu:0 compute", "forward", 0, 1}, {"cpu:0 output", "gather", 0, 1},
      {"cpu:0 host", "scatter", 0, 1}};
  std::vector<std::string> want = {"host",       "cpu:0 host",    "cpu:0 output", "cpu:0 compute",
                                   "cpu:0 comm", "cpu:1 compute", "cpu:10 comm"};
  CHECK(timeline_lanes(spans) == want);
}

TEST_CASE("timeline columns show the shortest overlapping span") {
  std::vector<TraceSpan> spans = {{"host", "replicate", 0, 10},
                                  {"cpu:0 compute", "forward", 10, 60},
                                  {"cpu:0 compute", "backward", 60, 100},
                                  {"cpu:0 compute", "reduce", 90, 92},
                                  {"cpu:0 compute", "late", 200, 300}};
  std::string text = timeline_render(spans, 0, 100, 10, false);
  CHECK(text.find("  host          |P.........|\n") != std::string::npos);
  CHECK(text.find("  cpu:0 compute |.FFFFFBBBR|\n") != std::string::npos);
  CHECK(text.find("0 ms") != std::string::npos);
  CHECK(text.find("0.1 ms") != std::string::npos);
  CHECK(text.find('\033') == std::string::npos);
}

TEST_CASE("timeline letters and legend cover the engine's span names") {
  CHECK(timeline_letter("scatter") == 'S');
  CHECK(timeline_letter("broadcast") == 'P');
  CHECK(timeline_letter("replicate") == 'P');
  CHECK(timeline_letter("forward") == 'F');
  CHECK(timeline_letter("gather") == 'G');
  CHECK(timeline_letter("loss") == 'L');
  CHECK(timeline_letter("backward") == 'B');
  CHECK(timeline_letter("reduce") == 'R');
  CHECK(timeline_letter("all-gather params") == 'A');
  CHECK(timeline_letter("optimizer") == 'O');
  CHECK(timeline_letter("something else") == '#');
  std::string legend = timeline_legend(false);
  for (const char* part : {"S scatter", "P replicate", "F forward", "B backward", "R reduce",
                           "G gather", "L loss", ". idle"})
    CHECK(legend.find(part) != std::string::npos);
}
