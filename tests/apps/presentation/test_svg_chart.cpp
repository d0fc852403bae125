// The line-chart SVG: well formed, one <path> per series, every point inside its
// panel's plot box (the axes cover the data), y ticks spanning the values,
// non-finite and empty data drawn as gaps or "no data" (never "nan" in a
// coordinate, also for 0, subnormal and extreme values), long series thinned per
// pixel column with their spikes kept, and text escaped.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "apps/presentation/svg_chart.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout::presentation;
using fanout::test::attr_values;
using fanout::test::count_of;
using fanout::test::numbers_in;
using fanout::test::texts_of_class;
using fanout::test::xml_problem;

namespace {

ChartSeries series(const std::string& label, std::vector<std::pair<double, double>> points) {
  ChartSeries s;
  s.label = label;
  s.points = std::move(points);
  return s;
}

// The plot box of the only panel: (x, y, width, height).
std::vector<double> plot_box(const std::string& svg) {
  const auto fills = attr_values(svg, "rect", "fill");
  const auto xs = attr_values(svg, "rect", "x"), ys = attr_values(svg, "rect", "y");
  const auto ws = attr_values(svg, "rect", "width"), hs = attr_values(svg, "rect", "height");
  // The background rect has no x: align from the end, where every rect has one.
  for (size_t i = 0; i < fills.size(); ++i) {
    if (fills[i] != "none") continue;
    const size_t k = i - (fills.size() - xs.size());
    return {std::stod(xs[k]), std::stod(ys[k]), std::stod(ws[i]), std::stod(hs[i])};
  }
  return {};
}

}  // namespace

TEST_CASE("svg_line_chart is well formed with one path per series, inside the plot box") {
  ChartPanel p;
  p.title = "loss";
  p.series = {series("a", {{1, 5.5}, {2, 4.0}, {3, 3.25}, {10, 2.0}}),
              series("b", {{1, 6.0}, {5, 1.5}}), series("c", {{4, 0.75}})};
  const std::string svg = svg_line_chart("title", "sub", {p});
  CHECK(xml_problem(svg) == "");
  CHECK(count_of(svg, "<path") == 3);
  CHECK(texts_of_class(svg, "legend") == std::vector<std::string>{"a", "b", "c"});
  const std::vector<double> box = plot_box(svg);
  REQUIRE(box.size() == 4);
  for (const std::string& d : attr_values(svg, "path", "d")) {
    const std::vector<double> v = numbers_in(d);
    REQUIRE(v.size() % 2 == 0);
    for (size_t i = 0; i < v.size(); i += 2) {
      CHECK(v[i] >= box[0] - 0.05);
      CHECK(v[i] <= box[0] + box[2] + 0.05);
      CHECK(v[i + 1] >= box[1] - 0.05);
      CHECK(v[i + 1] <= box[1] + box[3] + 0.05);
    }
  }
  // The y ticks span the values 0.75 .. 6.
  std::vector<double> ticks;
  for (const std::string& t : texts_of_class(svg, "ytick")) ticks.push_back(std::stod(t));
  REQUIRE(ticks.size() >= 3);
  CHECK(ticks.front() <= 0.75);
  CHECK(ticks.back() >= 6.0);
  // x ticks lie within the steps 1 .. 10.
  for (const std::string& t : texts_of_class(svg, "xtick")) {
    CHECK(std::stod(t) >= 1);
    CHECK(std::stod(t) <= 10);
  }
}

TEST_CASE("svg_line_chart leaves out NaN, infinities and huge values and says no data") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  ChartPanel p;
  p.title = "gaps";
  p.series = {series("holes", {{1, 2}, {2, nan}, {3, inf}, {4, -inf}, {5, 1e308}, {6, 3}}),
              series("all bad", {{1, nan}, {nan, 1}})};
  ChartPanel empty;
  empty.title = "nothing";
  empty.series = {series("none", {})};
  ChartPanel no_series;
  no_series.title = "no series";
  const std::string svg = svg_line_chart("t", "", {p, empty, no_series});
  CHECK(xml_problem(svg) == "");
  CHECK_FALSE(fanout::test::has_non_finite_coordinate(svg));
  CHECK(count_of(svg, "no data") == 2);
  const auto ds = attr_values(svg, "path", "d");
  REQUIRE(ds.size() == 2);  // one per series of the panel with data
  // The line breaks at the gap: two moves, (1, 2) and (6, 3).
  CHECK(count_of(ds[0], "M") == 2);
  CHECK(count_of(ds[0], "L") == 0);
  std::vector<double> ticks;
  for (const std::string& t : texts_of_class(svg, "ytick")) ticks.push_back(std::stod(t));
  REQUIRE_FALSE(ticks.empty());
  CHECK(ticks.back() < 1e6);  // 1e308 did not stretch the axis
}

TEST_CASE("svg_line_chart draws a single point and a constant series on a widened axis") {
  ChartPanel p;
  p.title = "flat";
  p.series = {series("one", {{7, 4.0}})};
  ChartPanel q;
  q.title = "bytes";
  q.y_format = AxisFormat::bytes;
  q.y_from_zero = true;
  q.series = {series("cpu:0", {{1, 3.0 * 1024 * 1024}, {2, 3.0 * 1024 * 1024}})};
  const std::string svg = svg_line_chart("t", "", {p, q});
  CHECK(xml_problem(svg) == "");
  CHECK_FALSE(fanout::test::has_non_finite_coordinate(svg));
  const auto ticks = texts_of_class(svg, "ytick");
  CHECK(std::find(ticks.begin(), ticks.end(), "0") != ticks.end());
  CHECK(std::find(ticks.begin(), ticks.end(), "3 MiB") != ticks.end());
}

TEST_CASE("chart text is escaped") {
  ChartPanel p;
  p.title = "<b>&\"'";
  p.series = {series("<script>alert(1)</script>", {{1, 1}, {2, 2}})};
  const std::string svg = svg_line_chart("a & b", "<i>", {p});
  CHECK(xml_problem(svg) == "");
  CHECK(count_of(svg, "<script") == 0);
  CHECK(count_of(svg, "&lt;script&gt;alert(1)&lt;/script&gt;") == 2);  // legend and tooltip
  CHECK(xml_escape("<a href=\"x\">'&'</a>") ==
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

TEST_CASE("chart_ticks steps by 1, 2 or 5 times a power of ten and covers the range") {
  CHECK(chart_ticks(0, 10, 5) == std::vector<double>{0, 2, 4, 6, 8, 10});
  const std::vector<double> fifths = chart_ticks(0, 1, 5);
  REQUIRE(fifths.size() == 6);
  for (size_t i = 0; i < fifths.size(); ++i) CHECK(fifths[i] == doctest::Approx(0.2 * i));
  const auto t = chart_ticks(1.5, 6, 5);
  REQUIRE(t.size() >= 3);
  CHECK(t.front() >= 1.5);
  CHECK(t.back() <= 6);
  CHECK(chart_ticks(3, 3).empty());
  CHECK(chart_ticks(0, std::numeric_limits<double>::infinity()).empty());
  CHECK(chart_ticks(0, std::nan("")).empty());
}

TEST_CASE("svg_line_chart keeps 0, subnormals and extreme finite values to finite coordinates") {
  const double tiny = std::numeric_limits<double>::denorm_min();  // 5e-324
  const double big = 1e300;
  const std::vector<std::vector<std::pair<double, double>>> cases = {
      {{1, tiny}, {2, 0}, {3, tiny}},             // apart by a subnormal
      {{1, tiny}, {2, tiny}},                     // one subnormal value
      {{1, 0}, {2, 0}},                           // all zero
      {{1, 1e-300}, {2, 2e-300}},                 // apart by less than any tick could say
      {{1, 1.0}, {2, std::nextafter(1.0, 2.0)}},  // apart by one rounding step
      {{1, -big}, {2, big}},                      // the widest span drawn
      {{1, big}, {2, big}},
      {{9.2e18, 1}, {9.2e18 + 2048, 2}},  // steps near the end of int64
  };
  for (const auto& points : cases) {
    for (AxisFormat format : {AxisFormat::plain, AxisFormat::bytes, AxisFormat::rate}) {
      CAPTURE(points[0].second);
      CAPTURE(points[1].second);
      ChartPanel p;
      p.title = "extreme";
      p.y_format = format;
      p.series = {series("s", points)};
      const std::string svg = svg_line_chart("t", "", {p});
      CHECK(xml_problem(svg) == "");
      CHECK_FALSE(fanout::test::has_non_finite_coordinate(svg));
      const auto ds = attr_values(svg, "path", "d");
      REQUIRE(ds.size() == 1);
      CHECK(count_of(ds[0], "L") == static_cast<int>(points.size()) - 1);  // every point drawn
      const std::vector<double> box = plot_box(svg);
      REQUIRE(box.size() == 4);
      const std::vector<double> v = numbers_in(ds[0]);
      for (size_t i = 0; i + 1 < v.size(); i += 2) {
        CHECK(v[i + 1] >= box[1] - 0.05);
        CHECK(v[i + 1] <= box[1] + box[3] + 0.05);
      }
      CHECK(texts_of_class(svg, "ytick").size() >= 2);
    }
  }
}

TEST_CASE("chart_points_thin keeps each column's first, lowest, highest and last point") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<double, double>> points;
  for (int i = 0; i < 1000000; ++i) points.emplace_back(i, 1.0 + (i % 7) * 0.01);
  points[500001].second = 9.0;   // a one-step spike
  points[700003].second = -5.0;  // and a dip
  points[300000].second = nan;   // a gap
  const auto thin = chart_points_thin(points, 0, 999999, 400);
  CHECK(thin.size() <= 4 * 401 + 2);
  CHECK(thin.size() >= 400);
  CHECK(thin.front() == points.front());
  CHECK(thin.back() == points.back());
  int gaps = 0;
  double highest = 0, lowest = 0;
  for (size_t i = 0; i < thin.size(); ++i) {
    if (std::isnan(thin[i].second)) {
      ++gaps;
      continue;
    }
    highest = std::max(highest, thin[i].second);
    lowest = std::min(lowest, thin[i].second);
    if (i > 0 && !std::isnan(thin[i - 1].second)) CHECK(thin[i - 1].first < thin[i].first);
  }
  CHECK(gaps == 1);
  CHECK(highest == 9.0);
  CHECK(lowest == -5.0);
  // A short series, or one that fits its columns, comes back as it is.
  const std::vector<std::pair<double, double>> few = {{1, 2}, {2, nan}, {3, 1}};
  CHECK(chart_points_thin(few, 1, 3, 400).size() == 3);
  CHECK(chart_points_thin(points, 0, 999999, 1000000).size() == points.size());
}

TEST_CASE("a million-point series is drawn in a small SVG with its spike at the top") {
  std::vector<std::pair<double, double>> points;
  for (int i = 1; i <= 1000000; ++i) points.emplace_back(i, 2.0 + std::sin(i * 0.001) * 0.1);
  points[654321].second = 7.5;
  ChartPanel p;
  p.title = "long";
  p.series = {series("loss", points)};
  const std::string svg = svg_line_chart("t", "", {p});
  CHECK(xml_problem(svg) == "");
  CHECK(svg.size() < 100000);
  const std::vector<double> box = plot_box(svg);
  REQUIRE(box.size() == 4);
  // The y axis runs from its first tick to its last: the spike is drawn where 7.5 is.
  std::vector<double> ticks;
  for (const std::string& t : texts_of_class(svg, "ytick")) ticks.push_back(std::stod(t));
  REQUIRE(ticks.size() >= 2);
  CHECK(ticks.back() >= 7.5);
  const std::vector<double> v = numbers_in(attr_values(svg, "path", "d").at(0));
  double top = box[1] + box[3];
  for (size_t i = 1; i < v.size(); i += 2) top = std::min(top, v[i]);
  const double spike_y =
      box[1] + box[3] * (1 - (7.5 - ticks.front()) / (ticks.back() - ticks.front()));
  CHECK(top == doctest::Approx(spike_y).epsilon(0.001));
}
