#pragma once
// Line charts as self-contained SVG: a grid of panels, each with axes, "nice"
// ticks, a legend and one <path> per series. Used for a run's curves.svg, for
// `fanout plot` overlays and inside `fanout report` pages. Non-finite values
// never reach a coordinate: such points are left out and break the line. Long
// series are thinned to what a pixel column can show (spikes kept).

#include <string>
#include <utility>
#include <vector>

namespace fanout::presentation {

// `text` with & < > " ' replaced by entities: safe in SVG/HTML text and attributes.
std::string xml_escape(const std::string& text);

// How a panel's y values are labelled.
enum class AxisFormat { plain, bytes, rate };  // 1.5e-3 / 512 MiB / 12.3k

struct ChartSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y), in x order
  int color = 0;                                  // index into the palette
  bool dashed = false;
  bool markers = false;  // a dot on every point (sparse series: evaluations)
  double width = 2.0;    // stroke width in px
};

struct ChartPanel {
  std::string title, x_label = "step";
  AxisFormat y_format = AxisFormat::plain;
  bool y_from_zero = false;  // the y axis includes 0 (amounts, rates)
  std::vector<ChartSeries> series;
};

// The palette's colour `i` (cycles), e.g. "#4c78a8".
const char* chart_color(int i);

// Panels laid out `columns` wide under a title and subtitle; a panel without
// any finite point says "no data".
std::string svg_line_chart(const std::string& title, const std::string& subtitle,
                           const std::vector<ChartPanel>& panels, int columns = 2);

// Tick values covering [lo, hi] at a 1-2-5 step, about `target` of them.
std::vector<double> chart_ticks(double lo, double hi, int target = 5);

// `points` as drawn `columns` pixels wide over x in [x_lo, x_hi]: per column
// only the first, lowest, highest and last point (in x order), so the line looks
// the same and a one-step spike stays visible. A point that cannot be drawn
// (non-finite) comes back as one (x, NaN) that breaks the line. Series of at
// most 4 points a column come back as they are.
std::vector<std::pair<double, double>> chart_points_thin(
    const std::vector<std::pair<double, double>>& points, double x_lo, double x_hi, int columns);

}  // namespace fanout::presentation
