#include "apps/presentation/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace fanout::presentation {

namespace {

// Tableau 10: distinct on white and for the common colour-vision deficiencies.
const char* const kPalette[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2",
                                "#b279a2", "#eeca3b", "#9d755d", "#ff9da6", "#79706e"};

// Values beyond this are treated as missing: their differences would overflow.
constexpr double kLargest = 1e300;
// Ranges narrower than this (0 and 5e-324, say) cannot be divided into ticks:
// their steps would underflow to 0 and every coordinate become NaN.
constexpr double kNarrowest = 1e-280;

bool usable(double v) {
  return std::isfinite(v) && std::fabs(v) <= kLargest;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string coord(double v) {
  return fmt("%.1f", v);
}

// Bytes are labelled in one unit per axis (the largest value's), so ticks read 0, 8, 16 MiB.
double bytes_unit(double largest, const char** name) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && largest >= 1024 * std::pow(1024.0, u)) ++u;
  *name = kUnits[u];
  return std::pow(1024.0, u);
}

std::string tick_label(double v, AxisFormat format, double unit, const char* unit_name) {
  if (std::fabs(v) < 1e-300) return "0";
  const double a = std::fabs(v);
  switch (format) {
    case AxisFormat::bytes:
      return fmt("%.4g", v / unit) + " " + unit_name;
    case AxisFormat::rate:
      if (a >= 1e9) return fmt("%.4gG", v / 1e9);
      if (a >= 1e6) return fmt("%.4gM", v / 1e6);
      if (a >= 1e3) return fmt("%.4gk", v / 1e3);
      return fmt("%.4g", v);
    case AxisFormat::plain:
      break;
  }
  return fmt("%.4g", v);
}

// A 1-2-5 step giving about `target` intervals over `span` (> 0).
double nice_step(double span, int target) {
  const double raw = span / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

struct Range {
  double lo = 0, hi = 0;
  bool any = false;
  void add(double v) {
    if (!usable(v)) return;
    lo = any ? std::min(lo, v) : v;
    hi = any ? std::max(hi, v) : v;
    any = true;
  }
  // A range too narrow to divide (one value, values apart by subnormals or by
  // less than a billionth of their size) becomes one around its middle.
  void widen() {
    const double width = hi - lo;
    if (width > kNarrowest && width > 1e-9 * std::max(std::fabs(lo), std::fabs(hi))) return;
    const double mid = lo / 2 + hi / 2;
    const double pad = std::fabs(mid) > kNarrowest ? std::fabs(mid) * 0.1 : 1.0;
    lo = mid - pad;
    hi = mid + pad;
  }
};

// Multiples of `step` in [lo, hi], within a hair of the ends (rounding must not drop them).
std::vector<double> ticks_every(double lo, double hi, double step) {
  std::vector<double> ticks;
  if (!(step > 0) || !usable(step)) return ticks;
  const double eps = step * 1e-9;
  const double first = std::ceil((lo - eps) / step);
  for (int k = 0; k < 50; ++k) {
    const double t = (first + k) * step;  // not a running sum: no drift
    if (t > hi + eps) break;
    ticks.push_back(std::fabs(t) < eps ? 0.0 : t);
  }
  return ticks;
}

// Legend entries flowed left to right in rows `width` wide: each entry's (x, row).
std::vector<std::pair<int, int>> legend_layout(const ChartPanel& p, int width) {
  std::vector<std::pair<int, int>> at;
  int x = 0, row = 0;
  for (const ChartSeries& s : p.series) {
    const int w = 30 + 7 * static_cast<int>(s.label.size()) + 14;
    if (x > 0 && x + w > width) x = 0, ++row;
    at.emplace_back(x, row);
    x += w;
  }
  return at;
}

int legend_rows(const ChartPanel& p, int width) {
  auto at = legend_layout(p, width);
  return at.empty() ? 0 : at.back().second + 1;
}

constexpr int kPanelW = 540, kPlotH = 210, kLeft = 74, kRight = 18, kBottom = 44, kTitleH = 26,
              kRowH = 17, kGap = 16;

void draw_panel(std::ostringstream& s, const ChartPanel& p, int x0, int y0, int header_h) {
  const int plot_w = kPanelW - kLeft - kRight;
  const int px = x0 + kLeft, py = y0 + header_h;
  s << "<g class='panel'>\n";
  s << "<text x='" << x0 + 8 << "' y='" << y0 + 18 << "' font-size='14' font-weight='bold'>"
    << xml_escape(p.title) << "</text>\n";
  // Legend under the title.
  auto at = legend_layout(p, kPanelW - 16);
  for (size_t i = 0; i < p.series.size(); ++i) {
    const ChartSeries& c = p.series[i];
    const int lx = x0 + 8 + at[i].first, ly = y0 + kTitleH + at[i].second * kRowH + 8;
    s << "<line x1='" << lx << "' y1='" << ly << "' x2='" << lx + 24 << "' y2='" << ly
      << "' stroke='" << chart_color(c.color) << "' stroke-width='" << coord(std::min(c.width, 4.0))
      << "'" << (c.dashed ? " stroke-dasharray='6 3'" : "") << "/>";
    s << "<text class='legend' x='" << lx + 30 << "' y='" << ly + 4 << "'>" << xml_escape(c.label)
      << "</text>\n";
  }
  Range xr, yr;
  for (const ChartSeries& c : p.series) {
    for (const auto& [x, y] : c.points) {
      if (!usable(x) || !usable(y)) continue;
      xr.add(x);
      yr.add(y);
    }
  }
  s << "<rect x='" << px << "' y='" << py << "' width='" << plot_w << "' height='" << kPlotH
    << "' fill='none' stroke='#999'/>\n";
  if (!xr.any) {
    s << "<text x='" << px + plot_w / 2 << "' y='" << py + kPlotH / 2
      << "' text-anchor='middle' fill='#777'>no data</text>\n</g>\n";
    return;
  }
  if (p.y_from_zero) yr.add(0.0);
  xr.widen();
  yr.widen();
  const char* unit_name = "";
  const double unit = p.y_format == AxisFormat::bytes
                          ? bytes_unit(std::max(std::fabs(yr.lo), std::fabs(yr.hi)), &unit_name)
                          : 1.0;
  // The y axis ends on ticks, so it covers every value.
  const double ystep = nice_step((yr.hi - yr.lo) / unit, 5) * unit;
  yr.lo = std::floor(yr.lo / ystep) * ystep;
  yr.hi = std::ceil(yr.hi / ystep) * ystep;
  auto sx = [&](double x) { return px + plot_w * (x - xr.lo) / (xr.hi - xr.lo); };
  auto sy = [&](double y) { return py + kPlotH - kPlotH * (y - yr.lo) / (yr.hi - yr.lo); };
  for (double t : ticks_every(yr.lo, yr.hi, ystep)) {
    if (!std::isfinite(sy(t))) continue;
    const std::string y = coord(sy(t));
    s << "<line x1='" << px << "' y1='" << y << "' x2='" << px + plot_w << "' y2='" << y
      << "' stroke='#e6e6e6'/><text class='ytick' x='" << px - 6 << "' y='" << y
      << "' dy='4' text-anchor='end'>" << tick_label(t, p.y_format, unit, unit_name) << "</text>\n";
  }
  for (double t : chart_ticks(xr.lo, xr.hi, 6)) {
    if (!std::isfinite(sx(t))) continue;
    const std::string x = coord(sx(t));
    s << "<line x1='" << x << "' y1='" << py << "' x2='" << x << "' y2='" << py + kPlotH
      << "' stroke='#f0f0f0'/><text class='xtick' x='" << x << "' y='" << py + kPlotH + 16
      << "' text-anchor='middle'>" << tick_label(t, AxisFormat::plain, 1, "") << "</text>\n";
  }
  s << "<text x='" << px + plot_w / 2 << "' y='" << py + kPlotH + 34
    << "' text-anchor='middle' fill='#555'>" << xml_escape(p.x_label) << "</text>\n";
  // Whether (x, y) has a place on the plot: a finite value whose coordinates are too.
  auto drawable = [&](double x, double y) {
    return usable(x) && usable(y) && std::isfinite(sx(x)) && std::isfinite(sy(y));
  };
  for (const ChartSeries& c : p.series) {
    const auto points = chart_points_thin(c.points, xr.lo, xr.hi, plot_w);
    std::string d;
    bool pen_down = false;
    for (const auto& [x, y] : points) {
      if (!drawable(x, y)) {
        pen_down = false;  // a gap where values are missing
        continue;
      }
      d += (pen_down ? " L" : (d.empty() ? "M" : " M")) + coord(sx(x)) + " " + coord(sy(y));
      pen_down = true;
    }
    s << "<path class='series' d='" << (d.empty() ? "M0 0" : d) << "' fill='none' stroke='"
      << chart_color(c.color) << "' stroke-width='" << coord(c.width)
      << "' stroke-linejoin='round' stroke-linecap='round'"
      << (c.dashed ? " stroke-dasharray='6 3'" : "") << (d.empty() ? " visibility='hidden'" : "")
      << "><title>" << xml_escape(c.label) << "</title></path>\n";
    if (!c.markers) continue;
    for (const auto& [x, y] : points) {
      if (!drawable(x, y)) continue;
      s << "<circle cx='" << coord(sx(x)) << "' cy='" << coord(sy(y)) << "' r='3' fill='"
        << chart_color(c.color) << "'/>";
    }
    s << "\n";
  }
  s << "</g>\n";
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string o;
  o.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

const char* chart_color(int i) {
  constexpr int n = sizeof kPalette / sizeof kPalette[0];
  return kPalette[((i % n) + n) % n];
}

std::vector<double> chart_ticks(double lo, double hi, int target) {
  if (!usable(lo) || !usable(hi) || !(hi > lo)) return {};
  return ticks_every(lo, hi, nice_step(hi - lo, target));
}

std::vector<std::pair<double, double>> chart_points_thin(
    const std::vector<std::pair<double, double>>& points, double x_lo, double x_hi, int columns) {
  columns = std::max(1, columns);
  if (points.size() <= 4 * static_cast<size_t>(columns) || !usable(x_lo) || !usable(x_hi) ||
      !(x_hi > x_lo))
    return points;
  std::vector<std::pair<double, double>> out;
  const double per_x = columns / (x_hi - x_lo);
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t first = kNone, lowest = 0, highest = 0, last = 0;
  double column = 0;
  auto flush = [&] {
    if (first == kNone) return;
    size_t kept[] = {first, lowest, highest, last};
    std::sort(std::begin(kept), std::end(kept));
    for (size_t k = 0; k < 4; ++k)
      if (k == 0 || kept[k] != kept[k - 1]) out.push_back(points[kept[k]]);
    first = kNone;
  };
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [x, y] = points[i];
    if (!usable(x) || !usable(y)) {
      flush();
      if (!out.empty() && !std::isnan(out.back().second))
        out.emplace_back(x, std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    const double at = std::clamp(std::floor((x - x_lo) * per_x), -1.0, columns + 1.0);
    if (first != kNone && at == column) {
      if (y < points[lowest].second) lowest = i;
      if (y > points[highest].second) highest = i;
      last = i;
      continue;
    }
    flush();
    first = lowest = highest = last = i;
    column = at;
  }
  flush();
  return out;
}

std::string svg_line_chart(const std::string& title, const std::string& subtitle,
                           const std::vector<ChartPanel>& panels, int columns) {
  columns = std::max(1, std::min<int>(columns, static_cast<int>(panels.size())));
  // Every panel gets the header of the one with the most legend rows: rows stay aligned.
  int header_h = kTitleH + 8;
  for (const ChartPanel& p : panels)
    header_h = std::max(header_h, kTitleH + legend_rows(p, kPanelW - 16) * kRowH + 8);
  const int panel_h = header_h + kPlotH + kBottom;
  const int rows = (static_cast<int>(panels.size()) + columns - 1) / columns;
  const int top = (title.empty() ? 0 : 40) + (subtitle.empty() ? 0 : 18);
  const int width = columns * kPanelW + (columns - 1) * kGap + 20;
  const int height = top + rows * panel_h + (rows > 0 ? (rows - 1) * kGap : 0) + 12;
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
    << "' viewBox='0 0 " << width << " " << height
    << "' font-family='DejaVu Sans, Helvetica, Arial, sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n";
  if (!title.empty())
    s << "<text x='12' y='26' font-size='17' font-weight='bold'>" << xml_escape(title)
      << "</text>\n";
  if (!subtitle.empty())
    s << "<text x='12' y='" << top - 12 << "' fill='#555'>" << xml_escape(subtitle) << "</text>\n";
  for (size_t i = 0; i < panels.size(); ++i) {
    const int col = static_cast<int>(i) % columns, row = static_cast<int>(i) / columns;
    draw_panel(s, panels[i], 10 + col * (kPanelW + kGap), top + row * (panel_h + kGap), header_h);
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace fanout::presentation
