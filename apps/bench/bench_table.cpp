#include "apps/bench/bench_table.h"

#include <algorithm>

#include "apps/data/terminal_text.h"
#include "apps/presentation/text_format.h"
#include "engine/core/allocator.h"

namespace fanout::bench {

using presentation::strf;

namespace {

std::string ms_str(double seconds) {
  return strf("%.1f", seconds * 1e3);
}
std::string bytes_of(int64_t bytes) {
  return bytes_str(static_cast<size_t>(bytes));
}

// The heads of parallel::kPhaseFields' columns, in its order: --wide, and narrow.
struct PhaseHeads {
  const char *wide, *narrow;
};
constexpr PhaseHeads kPhaseHeads[] = {
    {"scatter", "scatter"}, {"replic.", "replic."}, {"forward", "forward"}, {"gather", "gather"},
    {"loss", "loss"},       {"backward", "backw."}, {"reduce", "reduce"},   {"optim.", "optim."},
};
static_assert(std::size(kPhaseHeads) == std::size(parallel::kPhaseFields));

// Each phase's milliseconds in `phases`, in kPhaseFields' order.
std::vector<std::string> phase_cells(const parallel::PhaseTimes& phases) {
  std::vector<std::string> cells;
  for (const parallel::PhaseField& f : parallel::kPhaseFields)
    cells.push_back(ms_str(phases.*f.seconds));
  return cells;
}

// Where a row's note starts (after the mode column) and what fills the columns
// before its text: `first` right-aligned under tokens/s, `second` under speed-up.
std::string note_of(const BenchTable& t, const std::string& first, const std::string& second) {
  const std::vector<presentation::TextColumn>& c = t.layout.columns;
  std::string s =
      std::string(c[1].width - std::min(c[1].width, data::display_width(first)), ' ') + first;
  if (second.empty()) return s;
  s += std::string(1 + c[2].width + 1, ' ');
  return s + std::string(c[3].width - std::min(c[3].width, second.size()), ' ') + second;
}
}  // namespace

std::string bench_row_label(const presentation::BenchResult& r) {
  return r.mode + (r.precision == "bf16" ? " bf16" : "");
}

std::string bench_speedup_str(double tokens_per_s, double base) {
  return base > 0 ? strf("%.2fx", tokens_per_s / base) : "-";
}

BenchTable bench_table(const std::vector<std::string>& labels, size_t width) {
  BenchTable t;
  t.width = width;
  size_t label_width = width ? 0 : 24;
  for (const std::string& l : labels) label_width = std::max(label_width, data::display_width(l));
  const size_t w = width ? 0 : 1;  // --wide: a little air between the columns, as before
  t.layout.columns = {{"mode", label_width, true},
                      {"tokens/s", 8 + 2 * w},
                      {"spread", 6},
                      {"speed-up", 8},
                      {"step ms", 7 + w}};
  if (width == 0) {
    for (const PhaseHeads& h : kPhaseHeads) t.layout.columns.push_back({h.wide, 8});
  }
  // The bytes moved per step too where they fit, else in the block after the table.
  size_t used = 0;
  for (const presentation::TextColumn& c : t.layout.columns) used += c.width + 1;
  if (width == 0 || used + 2 * (9 + 1) <= width + 1) {
    t.layout.columns.push_back({"sent/step", 9 + w});
    t.layout.columns.push_back({"sums/step", 9 + w});
  }
  if (width == 0) t.layout.columns.push_back({"peak bytes per device", 0, true});
  t.layout.head = false;
  return t;
}

std::string bench_table_head(const BenchTable& t) {
  presentation::TextTable head = t.layout;
  head.head = true;
  return presentation::text_table_render(head, t.width);
}

std::string bench_table_row(const BenchTable& t, const presentation::BenchResult& r, double base) {
  presentation::TextTable one = t.layout;
  if (!r.failed.empty()) {
    one.rows = {{{bench_row_label(r)}, note_of(t, "failed", "") + "  " + r.failed}};
    return presentation::text_table_render(one, t.width);
  }
  std::vector<std::string> cells = {bench_row_label(r), strf("%.0f", r.tokens_per_s),
                                    presentation::step_times_spread_str(r.step),
                                    bench_speedup_str(r.tokens_per_s, base), ms_str(r.step_s)};
  if (t.width == 0) {
    for (std::string& cell : phase_cells(r.phases)) cells.push_back(std::move(cell));
  }
  if (cells.size() < t.layout.columns.size()) {
    cells.push_back(bytes_of(r.comm.replicate));
    cells.push_back(bytes_of(r.comm.reduce));
  }
  if (t.width == 0) {
    std::string peaks;
    for (const presentation::DevicePeak& p : r.peaks)
      peaks += (peaks.empty() ? "" : ", ") + p.device + " " + bytes_str(p.peak_bytes);
    cells.push_back(peaks);
  }
  one.rows = {{cells, ""}};
  return presentation::text_table_render(one, t.width);
}

std::string bench_table_peer(const BenchTable& t, const PeerRow& p, double base) {
  presentation::TextTable one = t.layout;
  const std::string note =
      p.status == "ok"
          ? note_of(t, strf("%.0f", p.tokens_per_s), bench_speedup_str(p.tokens_per_s, base)) +
                "  " + p.label
          : note_of(t, p.status, "") + "  " + p.label + ": " + p.reason;
  one.rows = {{{"PyTorch peer"}, note}};
  return presentation::text_table_render(one, t.width);
}

std::string bench_phase_table(const BenchTable& table,
                              const std::vector<presentation::BenchResult>& rows) {
  const size_t width = table.width;
  if (width == 0) return "";
  // The bytes per step, unless the table had room for them.
  const bool bytes = table.layout.columns.back().head != "sums/step";
  presentation::TextTable t;
  t.columns = {{"mode", 0, true}};
  for (const PhaseHeads& h : kPhaseHeads) t.columns.push_back({h.narrow});
  if (bytes) t.columns.insert(t.columns.end(), {{"sent/step"}, {"sums/step"}});
  for (const presentation::BenchResult& r : rows) {
    if (!r.failed.empty()) continue;
    std::vector<std::string> cells = {bench_row_label(r)};
    for (std::string& cell : phase_cells(r.phases)) cells.push_back(std::move(cell));
    if (bytes) cells.insert(cells.end(), {bytes_of(r.comm.replicate), bytes_of(r.comm.reduce)});
    t.rows.push_back({cells, ""});
  }
  if (t.rows.empty()) return "";
  return "\n" +
         presentation::text_wrap(
             std::string("ms per step by phase (the mean over the timed steps)") +
                 (bytes ? ", bytes sent per step" : ""),
             width) +
         presentation::text_table_render(t, width);
}

std::string bench_ranking_line(const std::vector<presentation::BenchResult>& rows, size_t width) {
  std::vector<std::string> precisions;
  for (const presentation::BenchResult& r : rows)
    if (std::find(precisions.begin(), precisions.end(), r.precision) == precisions.end())
      precisions.push_back(r.precision);
  std::string ties;
  for (const std::string& precision : precisions) {
    const presentation::BenchResult* best = nullptr;
    for (const presentation::BenchResult& r : rows)
      if (r.failed.empty() && r.precision == precision && (!best || r.step_s < best->step_s))
        best = &r;
    if (!best) continue;
    std::string close;
    for (const presentation::BenchResult& r : rows) {
      if (&r != best && r.failed.empty() && r.precision == precision &&
          presentation::step_times_overlap(r.step, best->step))
        close += " ~ " + r.mode;
    }
    if (!close.empty()) ties += (ties.empty() ? "" : "; ") + precision + " " + best->mode + close;
  }
  if (ties.empty()) return "";
  return presentation::text_wrap(
      "too close to rank (the middle halves of their step times overlap): " + ties +
          ". More --steps or --min-seconds, or a quieter machine, may separate "
          "them.",
      width, "  ");
}

}  // namespace fanout::bench
