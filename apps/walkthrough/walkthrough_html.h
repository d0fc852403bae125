#pragma once
// `fanout walkthrough --html`: the run as one self-contained page (inline CSS
// and SVG; no script, font or request leaves the file). At the top, which
// devices and build ran it and a chart of every mode's tokens/s, peak memory
// per device and bytes moved per step; then a section per mode with its
// fanout train flags, a few sentences, a diagram of the devices (what each
// holds, to one scale for the whole page; each move of the step as an arrow
// labelled with its measured bytes) and the step's timeline, one lane per
// trace lane (device streams, comm streams, the host).
//
// The elements a test or a reader's tool can find: <section class="mode"
// id=NAME>, <g class="move" data-kind data-bytes> holding <text
// class="bytes">, <g class="hold" data-device data-kind data-bytes> (a piece
// of a device's memory bar), <g class="lane" data-lane> holding <rect
// class="span">.

#include <string>
#include <vector>

#include "apps/walkthrough/walkthrough.h"
#include "apps/walkthrough/walkthrough_page.h"

namespace fanout::walkthrough {

struct PageInfo {
  std::string command;     // the command line that made the page
  std::string devices;     // which devices ran it, described
  std::string build;       // fanout's version, compiler and backends
  std::string model;       // the model and batch, one line
  std::string trace_path;  // where the Perfetto trace went; "" none
};

// The devices and build of this process, the model and batch of `o`.
PageInfo walkthrough_page_info(const WalkthroughOptions& o, int64_t parameters,
                               const std::string& command);

std::string walkthrough_html(const std::vector<PageSection>& sections, const PageInfo& info);

}  // namespace fanout::walkthrough
