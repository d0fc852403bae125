#pragma once
// A run's metrics as pictures: the panels of curves.svg (training and held-out
// loss, learning rate, tokens/s, peak memory per device, against step), the same
// panels overlaying several runs for `fanout plot`, and the file a finished
// `fanout train` leaves in its run directory.

#include <span>
#include <string>
#include <vector>

#include "apps/presentation/metrics_read.h"
#include "apps/presentation/svg_chart.h"

namespace fanout::presentation {

enum class CurveMetric { loss, val_loss, lr, tokens_per_s, memory };

struct LabeledRun {
  std::string label;  // the legend's name for the run (its directory name by default)
  RunMetrics metrics;
};

// "loss", "val_loss", "lr", "tokens_per_s", "memory" or "all" (loss with the
// held-out loss in one panel, lr, tokens/s, memory); throws naming the choices.
std::vector<CurveMetric> curve_metrics_parse(const std::string& name);

// One panel per metric; one series per run (and per device for memory). Runs
// are drawn first-thickest, so runs that coincide show as nested lines.
std::vector<ChartPanel> run_curves_panels(std::span<const LabeledRun> runs,
                                          const std::vector<CurveMetric>& which);

// A one-line account of a run: "steps 1-300, final loss 2.134, held-out 2.301 (best 2.29 at 200)".
std::string run_curves_summary(const RunMetrics& m);

std::string run_curves_svg(const std::string& title, const std::string& subtitle,
                           std::span<const LabeledRun> runs, const std::vector<CurveMetric>& which);

// Reads RUN_DIR/metrics.jsonl and writes RUN_DIR/curves.svg atomically (every
// panel); returns the path written.
std::string run_curves_write(const std::string& run_dir);

// The last component of a run directory ("runs/dp/" -> "dp").
std::string run_dir_label(const std::string& run_dir);

}  // namespace fanout::presentation
