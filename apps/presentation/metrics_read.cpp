#include "apps/presentation/metrics_read.h"

#include <filesystem>
#include <string_view>

#include "apps/presentation/metrics_line.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"

namespace fanout::presentation {

namespace {

// A log of a billion steps is far beyond any run; the cap keeps a wrong path cheap.
constexpr uint64_t kMaxMetricsBytes = uint64_t{4} << 30;

// Stores `value` at `step`. Logs go up a step a line, so the end is the usual
// place: a hint there keeps a million-line log to one pass.
void store(StepValues& into, int64_t step, double value) {
  if (into.empty() || into.rbegin()->first < step) {
    into.emplace_hint(into.end(), step, value);
  } else {
    into[step] = value;  // Note [Repeated steps]: the later line wins
  }
}

}  // namespace

RunMetrics metrics_parse(const std::string& text, const std::string& name) {
  RunMetrics m;
  size_t at = 0;
  for (int64_t number = 1; at < text.size(); ++number) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view line = std::string_view(text).substr(at, end - at);
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const MetricsLine v = metrics_line_read(line, name, number);
    ++m.lines;
    for (auto [into, value] : {std::pair{&m.loss, v.loss},
                               {&m.val_loss, v.val_loss},
                               {&m.lr, v.lr},
                               {&m.grad_norm, v.grad_norm},
                               {&m.tokens_per_s, v.tokens_per_s}})
      if (value) store(*into, v.step, *value);
    for (const auto& [device, bytes] : v.peak_bytes) store(m.peak_bytes[device], v.step, bytes);
  }
  return m;
}

RunMetrics metrics_read(const std::string& path) {
  return metrics_parse(file_read_regular(path, kMaxMetricsBytes), path);
}

RunMetrics metrics_read_run(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
  std::error_code ec;
  FANOUT_CHECK(std::filesystem::is_directory(run_dir, ec), run_dir,
               ": not a directory (give a fanout train run directory)");
  FANOUT_CHECK(std::filesystem::exists(path, ec), run_dir,
               ": no metrics.jsonl (not a fanout train run directory?)");
  return metrics_read(path);
}

}  // namespace fanout::presentation
