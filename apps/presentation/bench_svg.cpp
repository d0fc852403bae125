#include "apps/presentation/bench_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace fanout::presentation {

namespace {
std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&')
      o += "&amp;";
    else if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else
      o += c;
  }
  return o;
}

std::string num(double v, const char* fmt) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Each phase's fill, in parallel::kPhaseFields' order.
constexpr const char* kPhaseColors[] = {"#8dd3c7", "#ffffb3", "#80b1d3", "#fb8072",
                                        "#fdb462", "#bebada", "#b3de69", "#fccde5"};
static_assert(std::size(kPhaseColors) == std::size(parallel::kPhaseFields));
}  // namespace

std::string bench_svg(const std::string& title, const std::string& subtitle,
                      const std::vector<SvgRow>& rows) {
  // About 7 px per character of the longest label at 12 px.
  size_t longest = 0;
  for (const SvgRow& r : rows) longest = std::max(longest, r.label.size());
  const int label_w = std::max(190, static_cast<int>(longest) * 7 + 24);
  const int panel_w = 330, gap = 40, row_h = 34, top = 78;
  const int width = label_w + panel_w + gap + panel_w + 30;
  const int height = top + row_h * static_cast<int>(rows.size()) + 70;
  double max_tps = 1, max_ms = 1e-9;
  for (const SvgRow& r : rows) {
    max_tps = std::max(max_tps, r.tokens_per_s);
    if (r.has_phases) max_ms = std::max(max_ms, r.phases.total() * 1e3);
  }
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
    << "' font-family='DejaVu Sans, Helvetica, Arial, sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='16' y='24' font-size='16' font-weight='bold'>" << esc(title) << "</text>\n"
    << "<text x='16' y='42' fill='#555'>" << esc(subtitle) << "</text>\n";
  int x1 = label_w, x2 = label_w + panel_w + gap;
  s << "<text x='" << x1 << "' y='" << top - 10 << "' font-weight='bold'>tokens / s</text>\n"
    << "<text x='" << x2 << "' y='" << top - 10
    << "' font-weight='bold'>step time breakdown (ms)</text>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const SvgRow& r = rows[i];
    int y = top + static_cast<int>(i) * row_h;
    s << "<text x='" << label_w - 8 << "' y='" << y + 17 << "' text-anchor='end'>" << esc(r.label)
      << "</text>\n";
    // In double first: a non-finite rate (a zero-time step) must not reach the cast.
    const double frac = r.tokens_per_s / max_tps;
    int w = std::isfinite(frac) ? static_cast<int>(panel_w * std::clamp(frac, 0.0, 1.0)) : 0;
    s << "<rect x='" << x1 << "' y='" << y + 4 << "' width='" << std::max(w, 1) << "' height='"
      << row_h - 10 << "' fill='" << (r.has_phases ? "#4c78a8" : "#9e9e9e") << "'/>\n";
    std::string text = num(r.tokens_per_s, "%.0f");
    if (r.speedup > 0) text += "  (" + num(r.speedup, "%.2f") + "x)";
    s << "<text x='" << x1 + 4 << "' y='" << y + 20 << "' fill='white'>" << esc(text)
      << "</text>\n";
    if (!r.has_phases) {
      s << "<text x='" << x2 << "' y='" << y + 20
        << "' fill='#777'>(peer: throughput only)</text>\n";
      continue;
    }
    double at = 0;
    for (size_t i = 0; i < std::size(parallel::kPhaseFields); ++i) {
      const parallel::PhaseField& p = parallel::kPhaseFields[i];
      double ms = r.phases.*(p.seconds) * 1e3;
      double pw = panel_w * ms / max_ms;
      if (pw >= 0.5) {
        s << "<rect x='" << num(x2 + panel_w * at / max_ms, "%.1f") << "' y='" << y + 4
          << "' width='" << num(pw, "%.1f") << "' height='" << row_h - 10 << "' fill='"
          << kPhaseColors[i] << "'><title>" << p.name << " " << num(ms, "%.1f")
          << " ms</title></rect>\n";
      }
      at += ms;
    }
    s << "<text x='" << num(x2 + panel_w * at / max_ms + 4, "%.1f") << "' y='" << y + 20 << "'>"
      << num(at, "%.0f") << "</text>\n";
  }
  int ly = top + static_cast<int>(rows.size()) * row_h + 24, lx = x2;
  for (size_t i = 0; i < std::size(parallel::kPhaseFields); ++i) {
    const parallel::PhaseField& p = parallel::kPhaseFields[i];
    s << "<rect x='" << lx << "' y='" << ly - 10 << "' width='12' height='12' fill='"
      << kPhaseColors[i] << "'/><text x='" << lx + 16 << "' y='" << ly << "'>" << p.name
      << "</text>\n";
    lx += 16 + 8 * static_cast<int>(std::string(p.name).size()) + 14;
    if (lx > width - 90) lx = x2, ly += 18;
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace fanout::presentation
