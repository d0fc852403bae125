#pragma once
// The `fanout bench --svg` picture: throughput bars (tokens/s, with the speed-up
// over one device) beside a stacked step-time breakdown per mode, as a
// self-contained SVG a browser or any image viewer shows.

#include <string>
#include <vector>

#include "apps/presentation/bench_result.h"

namespace fanout::presentation {

struct SvgRow {
  std::string label;
  double tokens_per_s = 0;
  double speedup = 0;           // 0: not shown
  bool has_phases = true;       // peers report only throughput
  parallel::PhaseTimes phases;  // seconds per step
};

std::string bench_svg(const std::string& title, const std::string& subtitle,
                      const std::vector<SvgRow>& rows);

}  // namespace fanout::presentation
