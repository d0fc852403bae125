// `fanout plot RUN... --out FILE.svg`: several runs' metrics.jsonl overlaid in one
// SVG (a legend entry per run: its directory name, or --labels), so runs that
// should agree (dp, zero1 and ddp on one seed) can be seen to coincide.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "apps/presentation/run_curves.h"
#include "apps/train/run_dir.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"

namespace fanout::app {

namespace {
struct PlotArgs {
  std::vector<std::string> runs;
  std::string out, metric = "all", labels, title;
};

// "a,b,c" -> {"a", "b", "c"}; an empty name is refused.
std::vector<std::string> split_labels(const std::string& text, size_t runs) {
  std::vector<std::string> labels;
  if (text.empty()) return labels;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    labels.push_back(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    FANOUT_CHECK(!labels.back().empty(), "--labels ", text, ": an empty name");
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  FANOUT_CHECK(labels.size() == runs, "--labels names ", labels.size(), " runs but ", runs,
               " were given");
  return labels;
}

// Note [Replacing an existing output]: never a run's own files, and over an
// existing file only when it is an SVG fanout wrote (plot's, or train's curves.svg).
OutputRules plot_output_rules(const std::vector<std::string>& runs) {
  std::vector<std::string> inputs;
  for (const std::string& run : runs) {
    for (std::string& f : train::run_dir_inputs(run)) inputs.push_back(std::move(f));
  }
  return written_by_fanout_rules("an SVG written by fanout", "<svg", std::move(inputs));
}

int run_plot(const PlotArgs& a) {
  const OutputRules rules = plot_output_rules(a.runs);
  file_check_output(a.out, "--out", rules);
  const std::vector<presentation::CurveMetric> which = presentation::curve_metrics_parse(a.metric);
  const std::vector<std::string> labels = split_labels(a.labels, a.runs.size());
  std::vector<presentation::LabeledRun> runs;
  std::string names;
  for (size_t i = 0; i < a.runs.size(); ++i) {
    runs.push_back({labels.empty() ? presentation::run_dir_label(a.runs[i]) : labels[i],
                    presentation::metrics_read_run(a.runs[i])});
    names += (i ? ", " : "") + runs.back().label;
  }
  const std::string title = a.title.empty() ? "fanout runs: " + names : a.title;
  std::string subtitle;
  if (runs.size() == 1) subtitle = presentation::run_curves_summary(runs[0].metrics);
  file_write_atomic(
      a.out,
      std::string(kWrittenByFanout) + presentation::run_curves_svg(title, subtitle, runs, which),
      "--out", rules);
  std::printf("plot of %zu run%s written to %s\n", runs.size(), runs.size() == 1 ? "" : "s",
              a.out.c_str());
  return 0;
}
}  // namespace

Command add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Overlay the metrics of one or more runs in an SVG");
  auto a = std::make_shared<PlotArgs>();
  cmd->add_option("runs", a->runs, "Run directories (each with a metrics.jsonl)")
      ->required()
      ->type_name("RUN...");
  cmd->add_option("--out", a->out,
                  "The SVG file to write: a new file, or an SVG fanout wrote before (any other "
                  "file, and the runs' own files, are never replaced)")
      ->required()
      ->type_name("FILE.svg")
      ->check(not_empty());
  cmd->add_option("--metric", a->metric, "loss, val_loss, lr, tokens_per_s, memory or all")
      ->capture_default_str()
      ->check(not_empty());
  cmd->add_option("--labels", a->labels,
                  "Legend names, one per run: a,b,c (default: directory names)")
      ->check(not_empty());
  cmd->add_option("--title", a->title, "The picture's title")->check(not_empty());
  return [cmd, a]() -> int { return cmd->parsed() ? run_plot(*a) : -1; };
}

}  // namespace fanout::app
