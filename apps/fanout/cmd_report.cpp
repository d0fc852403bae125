// `fanout report RUN... --out report.html`: one self-contained page (inline SVG
// and CSS, nothing fetched) with each run's curves, settings, losses, and the
// trace and bench figures found in its directory or given with --bench.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "apps/presentation/report_html.h"
#include "apps/train/run_dir.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"

namespace fanout::app {

namespace {
struct ReportArgs {
  presentation::ReportOptions options;
  std::string out, labels;
};

// Note [Replacing an existing output]: never a file the page is drawn from (a run's
// metrics, traces, bench files and checkpoints, --bench), and over an existing file
// only when it is a page fanout wrote.
OutputRules report_output_rules(const presentation::ReportOptions& o) {
  std::vector<std::string> inputs;
  for (const std::string& run : o.runs) {
    for (std::string& f : train::run_dir_inputs(run)) inputs.push_back(std::move(f));
  }
  inputs.insert(inputs.end(), o.bench_files.begin(), o.bench_files.end());
  return written_by_fanout_rules("an HTML page written by fanout", "<!DOCTYPE html>",
                                 std::move(inputs));
}

int run_report(ReportArgs a) {
  const OutputRules rules = report_output_rules(a.options);
  file_check_output(a.out, "--out", rules);
  if (!a.labels.empty()) {
    size_t at = 0;
    while (true) {
      const size_t comma = a.labels.find(',', at);
      a.options.labels.push_back(
          a.labels.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      FANOUT_CHECK(!a.options.labels.back().empty(), "--labels ", a.labels, ": an empty name");
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  // The mark goes before the doctype: HTML allows a comment there (no quirks mode).
  file_write_atomic(a.out, std::string(kWrittenByFanout) + presentation::report_html(a.options),
                    "--out", rules);
  std::printf("report of %zu run%s written to %s\n", a.options.runs.size(),
              a.options.runs.size() == 1 ? "" : "s", a.out.c_str());
  return 0;
}
}  // namespace

Command add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "One self-contained HTML page about one or more runs");
  auto a = std::make_shared<ReportArgs>();
  cmd->add_option("runs", a->options.runs, "Run directories (each with a metrics.jsonl)")
      ->required()
      ->type_name("RUN...");
  cmd->add_option("--out", a->out,
                  "The HTML file to write: a new file, or a page fanout wrote before (any other "
                  "file, and the runs' own files, are never replaced)")
      ->required()
      ->type_name("FILE.html")
      ->check(not_empty());
  cmd->add_option("--bench", a->options.bench_files,
                  "`fanout bench --json` output to show (repeat for several)")
      ->type_name("FILE.json")
      ->check(not_empty());
  cmd->add_option("--labels", a->labels, "Names, one per run: a,b,c (default: directory names)")
      ->check(not_empty());
  cmd->add_option("--title", a->options.title, "The page's title")
      ->capture_default_str()
      ->check(not_empty());
  return [cmd, a]() -> int { return cmd->parsed() ? run_report(*a) : -1; };
}

}  // namespace fanout::app
