#pragma once
// An ASCII picture of recorded trace spans: one row per lane ("host",
// "cpu:0 compute", "cpu:0 comm", ...), time scaled to a fixed number of columns,
// one letter per phase (F forward, B backward, R reduce, ...). The walkthrough
// prints one after each mode; the Perfetto trace holds the same spans in full.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/trace.h"

namespace fanout::presentation {

// The letter a span name is drawn with: S scatter, P replicate/broadcast,
// F forward, G gather, L loss, B backward, R reduce (and reduce-scatter),
// A all-gather, O optimizer; '#' for any other span.
char timeline_letter(const std::string& span_name);

// "legend: S scatter  P replicate/broadcast  F forward ... . idle"
std::string timeline_legend(bool color);

// Lanes in display order: "host" first, then each device's host, output,
// compute and comm lanes, devices in kind and index order.
std::vector<std::string> timeline_lanes(const std::vector<TraceSpan>& spans);

// Spans overlapping [t0_us, t1_us), drawn `width` columns wide, one row per
// lane, then a time axis. A column shows the shortest span that overlaps it,
// so brief phases (a scatter) stay visible next to long ones. ANSI colours
// when `color`.
std::string timeline_render(const std::vector<TraceSpan>& spans, int64_t t0_us, int64_t t1_us,
                            int width, bool color);

// The share of the stages' time idle in a traced pipeline step: the action
// spans (F3, B0, I1, W2) between t0_us and t1_us, summed per stage lane, against
// the lanes times the span from the first to the last (-1 when there are none).
double trace_pipeline_bubble(const std::vector<TraceSpan>& spans, int64_t t0_us, int64_t t1_us);

}  // namespace fanout::presentation
