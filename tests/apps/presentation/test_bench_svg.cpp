// The bench picture: a complete SVG document, every mode labelled (escaped), bars
// proportional to tokens/s, and a legend for every phase of the breakdown.

#include <doctest/doctest.h>

#include <regex>

#include "apps/presentation/bench_svg.h"

using namespace fanout::presentation;

TEST_CASE("bench svg draws every row with bars proportional to tokens per second") {
  SvgRow fast{"zero1", 2000, 2.0, true, {}};
  fast.phases.forward = 0.03, fast.phases.backward = 0.05;
  SvgRow slow{"1 device <cpu:0>", 1000, 1.0, true, {}};
  slow.phases.forward = 0.06, slow.phases.backward = 0.1;
  SvgRow peer{"PyTorch DDP (gloo, 2 processes), torch 1.13", 1500, 1.5, false, {}};
  std::string svg = bench_svg("title & more", "subtitle", {slow, fast, peer});
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("title &amp; more") != std::string::npos);
  CHECK(svg.find("1 device &lt;cpu:0&gt;") != std::string::npos);  // escaped
  CHECK(svg.find("(peer: throughput only)") != std::string::npos);
  for (const char* phase :
       {"scatter", "replicate", "forward", "gather", "loss", "backward", "reduce", "optimizer"}) {
    CAPTURE(phase);
    CHECK(svg.find(std::string(">") + phase + "</text>") != std::string::npos);
  }
  // The throughput bars: the fastest spans the whole panel, the others in proportion.
  std::regex bar(
      "<rect x='(\\d+)' y='\\d+' width='(\\d+)' height='\\d+' fill='#(4c78a8|9e9e9e)'/>");
  std::vector<int> widths;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), bar); it != std::sregex_iterator();
       ++it)
    widths.push_back(std::stoi((*it)[2]));
  REQUIRE(widths.size() == 3);
  CHECK(widths[1] == 330);
  CHECK(widths[0] == 165);
  CHECK(widths[2] == 247);
  // The longest label fits: the label column is wider than the default.
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, bar));
  CHECK(std::stoi(m[1]) > 190);
}
