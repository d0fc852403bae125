// `fanout report RUN... --out report.html`: one self-contained page (inline SVG
// and CSS, nothing fetched) with each run's curves, settings, losses, and the
// trace and bench figures found in its directory or given with --bench.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/fanout/commands.h"
#include "apps/presentation/report_html.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"

namespace fanout::app {

namespace {
struct ReportArgs {
  presentation::ReportOptions options;
  std::string out, labels;
};

int run_report(ReportArgs a) {
  file_check_output(a.out, "--out");
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
  file_write_atomic(a.out, presentation::report_html(a.options), "--out");
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
  cmd->add_option("--out", a->out, "The HTML file to write")->required()->type_name("FILE.html");
  cmd->add_option("--bench", a->options.bench_files,
                  "`fanout bench --json` output to show (repeat for several)")
      ->type_name("FILE.json");
  cmd->add_option("--labels", a->labels, "Names, one per run: a,b,c (default: directory names)");
  cmd->add_option("--title", a->options.title, "The page's title")->capture_default_str();
  return [cmd, a]() -> int { return cmd->parsed() ? run_report(*a) : -1; };
}

}  // namespace fanout::app
