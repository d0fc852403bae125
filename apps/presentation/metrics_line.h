#pragma once
// One line of a run's metrics.jsonl (see metrics_read.h) as the values a chart
// needs. The trainer writes a million such lines in a long run, so the usual
// line is read by a small scanner that builds no JSON document; a line of any
// form the scanner does not take (strings with escapes, arrays, duplicate keys,
// anything malformed) goes through json_parse, which names what is wrong.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fanout::presentation {

struct MetricsLine {
  int64_t step = 0;
  // A field absent from the line or null in it (a non-finite number) is empty.
  std::optional<double> loss, val_loss, lr, grad_norm, tokens_per_s;
  std::vector<std::pair<std::string, double>> peak_bytes;  // device -> bytes, nulls left out
  bool operator==(const MetricsLine&) const = default;
};

// The line read by the scanner; false (and `out` unspecified) when it declines
// the line: then metrics_line_from_json decides.
bool metrics_line_scan(std::string_view line, MetricsLine& out);

// The line read through json_parse (the reference for the scanner); throws
// "NAME:NUMBER: ..." when it is not a JSON object with an integer "step" within
// int64 and numbers (or null) for the fields above.
MetricsLine metrics_line_from_json(std::string_view line, const std::string& name, int64_t number);

// The scanner's reading, else metrics_line_from_json's.
MetricsLine metrics_line_read(std::string_view line, const std::string& name, int64_t number);

}  // namespace fanout::presentation
