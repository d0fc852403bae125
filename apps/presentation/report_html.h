#pragma once
// `fanout report`: one self-contained HTML page for one or more runs (inline SVG
// and CSS, no scripts, fonts or images from anywhere). Per run: its curves, a
// summary (final and best losses), its settings from the newest checkpoint's
// trainer_state.json (and the model's config.json), trace figures when the run
// directory holds a Chrome trace (trace*.json), and bench figures when it holds
// `fanout bench --json` output (bench*.json). Every string read from a file is
// HTML-escaped.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/trace.h"

namespace fanout::presentation {

struct ReportOptions {
  std::vector<std::string> runs;         // run directories
  std::vector<std::string> labels;       // empty, or one per run
  std::vector<std::string> bench_files;  // `fanout bench --json` files for the whole page
  std::string title = "fanout runs";
};

// The page. Throws fanout::Error naming the file for a run without
// metrics.jsonl, a malformed metrics line (FILE:LINE), a --bench file that is
// not bench JSON, a checkpoint that cannot be read, or a trace or bench file in
// a run directory that is not JSON; one that is JSON of another shape is named
// on the page instead.
std::string report_html(const ReportOptions& options);

// The settings a run was started with: "flags" of the newest checkpoint's
// trainer_state.json plus its "step", "seed", "tokens_seen"; `from` gets the
// checkpoint directory. Null when the run has no checkpoint; throws naming the
// file when it has one that cannot be read.
nlohmann::json report_run_settings(const std::string& run_dir, std::string* from);

// Spans of a Chrome trace JSON ({"traceEvents": [...]}, as fanout writes it:
// thread_name metadata naming the lanes, "X" events); throws naming `path`.
std::vector<TraceSpan> report_trace_read(const std::string& path);

// `fanout bench --json` output: checks the shape ({"results": [{"mode",
// "tokens_per_s", ...}]}); throws naming `path`.
nlohmann::json report_bench_read(const std::string& path);

}  // namespace fanout::presentation
