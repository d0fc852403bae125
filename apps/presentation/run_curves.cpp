#include "apps/presentation/run_curves.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/core/check.h"
#include "engine/core/file_io.h"

namespace fanout::presentation {

namespace {

namespace fs = std::filesystem;

std::vector<std::pair<double, double>> points_of(const StepValues& v) {
  std::vector<std::pair<double, double>> p;
  p.reserve(v.size());
  for (const auto& [step, value] : v) p.emplace_back(static_cast<double>(step), value);
  return p;
}

// Later runs thinner, so that a run hidden under another still shows at its edges.
double width_of(size_t run, size_t runs) {
  return runs == 1 ? 2.0 : std::max(1.5, 5.0 - 1.5 * static_cast<double>(run));
}

// Evaluations are few: they get dots, unless there are many.
bool sparse(const StepValues& v) {
  return v.size() <= 60;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::vector<CurveMetric> curve_metrics_parse(const std::string& name) {
  if (name == "loss") return {CurveMetric::loss};
  if (name == "val_loss") return {CurveMetric::val_loss};
  if (name == "lr") return {CurveMetric::lr};
  if (name == "tokens_per_s") return {CurveMetric::tokens_per_s};
  if (name == "memory") return {CurveMetric::memory};
  FANOUT_CHECK(name == "all", "--metric ", name,
               ": unknown (choose loss, val_loss, lr, tokens_per_s, memory or all)");
  return {CurveMetric::loss, CurveMetric::val_loss, CurveMetric::lr, CurveMetric::tokens_per_s,
          CurveMetric::memory};
}

std::vector<ChartPanel> run_curves_panels(std::span<const LabeledRun> runs,
                                          const std::vector<CurveMetric>& which) {
  const bool one = runs.size() == 1;
  auto has = [&](CurveMetric m) { return std::find(which.begin(), which.end(), m) != which.end(); };
  const bool both_losses = has(CurveMetric::loss) && has(CurveMetric::val_loss);
  std::vector<ChartPanel> panels;
  auto name = [&](const LabeledRun& r, const std::string& what) {
    if (one && !what.empty()) return what;
    return r.label + (what.empty() ? "" : " " + what);
  };
  if (has(CurveMetric::loss) || has(CurveMetric::val_loss)) {
    ChartPanel p;
    p.title = both_losses                  ? "loss (training, held-out dashed)"
              : has(CurveMetric::val_loss) ? "held-out loss"
                                           : "training loss";
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunMetrics& m = runs[i].metrics;
      const int color = static_cast<int>(i);
      if (has(CurveMetric::loss)) {
        p.series.push_back({name(runs[i], both_losses ? "training" : ""), points_of(m.loss), color,
                            false, false, width_of(i, runs.size())});
      }
      // With both in one panel, a run without evaluations adds no empty legend entry.
      if (has(CurveMetric::val_loss) && (!both_losses || !m.val_loss.empty())) {
        p.series.push_back({name(runs[i], both_losses ? "held-out" : ""), points_of(m.val_loss),
                            one && both_losses ? 1 : color, both_losses, sparse(m.val_loss),
                            width_of(i, runs.size())});
      }
    }
    panels.push_back(std::move(p));
  }
  auto simple = [&](CurveMetric metric, const char* title, AxisFormat format,
                    StepValues RunMetrics::*field) {
    if (!has(metric)) return;
    ChartPanel p;
    p.title = title;
    p.y_format = format;
    p.y_from_zero = metric == CurveMetric::tokens_per_s;
    for (size_t i = 0; i < runs.size(); ++i) {
      p.series.push_back({name(runs[i], ""), points_of(runs[i].metrics.*field), static_cast<int>(i),
                          false, false, width_of(i, runs.size())});
    }
    panels.push_back(std::move(p));
  };
  simple(CurveMetric::lr, "learning rate", AxisFormat::plain, &RunMetrics::lr);
  simple(CurveMetric::tokens_per_s, "tokens / s", AxisFormat::rate, &RunMetrics::tokens_per_s);
  if (has(CurveMetric::memory)) {
    ChartPanel p;
    p.title = "peak memory per device";
    p.y_format = AxisFormat::bytes;
    p.y_from_zero = true;
    int color = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      for (const auto& [device, values] : runs[i].metrics.peak_bytes) {
        p.series.push_back({name(runs[i], device), points_of(values), color++, false, false,
                            width_of(i, runs.size())});
      }
    }
    panels.push_back(std::move(p));
  }
  return panels;
}

std::string run_curves_summary(const RunMetrics& m) {
  if (m.loss.empty() && m.val_loss.empty()) return "no steps logged";
  std::string s;
  if (!m.loss.empty()) {
    s = "steps " + std::to_string(m.loss.begin()->first) + "-" +
        std::to_string(m.loss.rbegin()->first) + ", final loss " +
        fmt("%.4g", m.loss.rbegin()->second);
  }
  if (!m.val_loss.empty()) {
    auto best = m.val_loss.begin();
    for (auto it = m.val_loss.begin(); it != m.val_loss.end(); ++it)
      if (std::isfinite(it->second) && !(best->second <= it->second)) best = it;
    s += std::string(s.empty() ? "" : ", ") + "held-out " +
         fmt("%.4g", m.val_loss.rbegin()->second) + " (best " + fmt("%.4g", best->second) +
         " at step " + std::to_string(best->first) + ")";
  }
  return s;
}

std::string run_curves_svg(const std::string& title, const std::string& subtitle,
                           std::span<const LabeledRun> runs,
                           const std::vector<CurveMetric>& which) {
  return svg_line_chart(title, subtitle, run_curves_panels(runs, which), which.size() > 1 ? 2 : 1);
}

std::string run_curves_write(const std::string& run_dir) {
  LabeledRun run{run_dir_label(run_dir), metrics_read_run(run_dir)};
  const std::string path = (fs::path(run_dir) / "curves.svg").string();
  // Marked as fanout's, so `plot RUN --out RUN/curves.svg` may redraw it (file_io.h).
  file_write_atomic(path,
                    std::string(kWrittenByFanout) + run_curves_svg("fanout train: " + run.label,
                                                                   run_curves_summary(run.metrics),
                                                                   std::span(&run, 1),
                                                                   curve_metrics_parse("all")),
                    "curves.svg");
  return path;
}

std::string run_dir_label(const std::string& run_dir) {
  fs::path p = fs::path(run_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") {
    std::error_code ec;
    fs::path abs = fs::weakly_canonical(run_dir, ec);
    if (!ec && !abs.filename().empty()) name = abs.filename().string();
  }
  return name.empty() ? run_dir : name;
}

}  // namespace fanout::presentation
