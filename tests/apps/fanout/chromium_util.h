#pragma once
// Headless Chromium for the tests that render fanout's pages (report,
// walkthrough): each run under a timeout in a process group of its own that the
// test kills, with its own profile folder; a PNG's size and colours decoded
// without PIL; and a layout check run inside the browser over every SVG text.

#include <string>
#include <vector>

#include "tests/apps/fanout/cli_runner.h"

namespace fanout::test {

// Whether /usr/bin/chromium can run. Under CI (which installs it,
// third_party/install_deps.sh) a missing browser fails the test; elsewhere the
// caller skips its rendering.
bool chromium_ready();

// Chromium on `url` with `flags` (--screenshot=..., --dump-dom, ...), its
// profile in tmp/chromium-profile and its output in `log`: the exit code.
int chromium_run(const TempDir& tmp, const std::vector<std::string>& flags, const std::string& url,
                 const std::string& log);

// How many processes' command lines mention this test's Chromium profile,
// after up to 5 s for them to go.
int chromium_left_running(const TempDir& tmp);

struct PngStats {
  int width = 0, height = 0, colours = 0;
  double non_white = 0;  // the share of sampled pixels that are not white
};
PngStats png_stats(const TempDir& tmp, const std::string& png);

// `page` loaded in a 1280-pixel-wide frame: every <text> of every SVG measured
// in the browser. Lines: "load_ms N" (the page's load event, from navigation
// start), "page_width N" (its scroll width), "texts N", then one line per
// problem: "cut SECTION CLASS: TEXT" (a text past its SVG's viewBox) and
// "overlap SECTION CLASS: A | B" (two texts' boxes overlapping); "error ..."
// when the check itself failed.
std::vector<std::string> chromium_layout_report(const TempDir& tmp, const std::string& page);

}  // namespace fanout::test
