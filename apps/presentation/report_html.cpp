#include "apps/presentation/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "apps/presentation/bench_svg.h"
#include "apps/presentation/run_curves.h"
#include "apps/presentation/svg_chart.h"
#include "apps/presentation/trace_timeline.h"
#include "apps/train/checkpoint.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"
#include "engine/core/json_parse.h"

namespace fanout::presentation {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMaxJsonBytes = uint64_t{256} << 20;
// The trace picture shows the last this many spans (a few steps) at a readable scale.
constexpr size_t kTraceWindowSpans = 400;
// Trace times past this many microseconds (31 years) are not times.
constexpr double kMaxTraceUs = 1e15;
// Bench figures (tokens/s, speed-ups, seconds) past this are not measurements.
constexpr double kMaxBenchFigure = 1e15;

const char* const kCss = R"(
body { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; margin: 24px; color: #222;
       max-width: 1160px; }
h1 { font-size: 24px; margin-bottom: 4px; }
h2 { font-size: 20px; border-bottom: 2px solid #4c78a8; padding-bottom: 4px; margin-top: 36px; }
h3 { font-size: 16px; margin-top: 22px; }
.path, .note { color: #666; font-size: 13px; }
.summary { font-size: 15px; margin: 8px 0 12px; }
svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 12px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f3f6fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.kv { columns: 3 300px; column-gap: 24px; font-size: 13px; }
.kv div { break-inside: avoid; border-bottom: 1px dotted #ddd; padding: 2px 0; display: flex;
          justify-content: space-between; gap: 12px; }
.kv b { font-weight: normal; color: #555; }
.kv span { text-align: right; overflow-wrap: anywhere; }
nav a { margin-right: 14px; }
)";

std::string h(const std::string& s) {
  return xml_escape(s);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt("%.1f", b) + " " + units[u];
}

// A JSON value as one line of text (strings without their quotes).
std::string value_text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string kv_block(const json& j) {
  std::string s = "<div class='kv'>\n";
  for (const auto& [key, value] : j.items()) {
    if (value.is_object() || value.is_array()) continue;
    s += "<div><b>" + h(key) + "</b><span>" + h(value_text(value)) + "</span></div>\n";
  }
  return s + "</div>\n";
}

// Files NAME*.json directly in `dir`, sorted.
std::vector<std::string> files_named(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".json" && e.is_regular_file(ec))
      found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// --- trace ------------------------------------------------------------------------

// The colours of `fanout bench --svg` (bench_svg.cpp), so one phase looks the same everywhere.
const char* letter_color(char letter) {
  switch (letter) {
    case 'S':
      return "#8dd3c7";
    case 'P':
      return "#ffffb3";
    case 'F':
      return "#80b1d3";
    case 'G':
      return "#fb8072";
    case 'L':
      return "#fdb462";
    case 'B':
      return "#bebada";
    case 'R':
      return "#b3de69";
    case 'O':
      return "#fccde5";
    case 'A':
      return "#bc80bd";
    default:
      return "#cccccc";
  }
}

std::string trace_svg(std::vector<TraceSpan> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const TraceSpan& a, const TraceSpan& b) { return a.begin_us < b.begin_us; });
  if (spans.size() > kTraceWindowSpans)
    spans.erase(spans.begin(), spans.end() - static_cast<std::ptrdiff_t>(kTraceWindowSpans));
  const std::vector<std::string> lanes = timeline_lanes(spans);
  int64_t t0 = spans.front().begin_us, t1 = t0 + 1;
  for (const TraceSpan& s : spans) t1 = std::max(t1, s.end_us);
  const int label_w = 170, plot_w = 900, row_h = 20, top = 30;
  const int height = top + row_h * static_cast<int>(lanes.size()) + 50;
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << label_w + plot_w + 20 << "' height='"
    << height << "' font-family='DejaVu Sans, Helvetica, Arial, sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n<text x='8' y='18' fill='#555'>the last "
    << spans.size() << " spans: " << fmt("%.1f", (t1 - t0) / 1e3) << " ms</text>\n";
  std::map<std::string, int> row_of;
  for (size_t i = 0; i < lanes.size(); ++i) {
    row_of[lanes[i]] = static_cast<int>(i);
    s << "<text x='" << label_w - 8 << "' y='" << top + static_cast<int>(i) * row_h + 14
      << "' text-anchor='end'>" << h(lanes[i]) << "</text>\n";
  }
  const double scale = plot_w / static_cast<double>(t1 - t0);
  for (const TraceSpan& sp : spans) {
    const double x = label_w + (sp.begin_us - t0) * scale;
    const double w = std::max(0.8, (sp.end_us - sp.begin_us) * scale);
    s << "<rect x='" << fmt("%.1f", x) << "' y='" << top + row_of[sp.lane] * row_h + 2
      << "' width='" << fmt("%.1f", w) << "' height='" << row_h - 4 << "' fill='"
      << letter_color(timeline_letter(sp.name)) << "'><title>" << h(sp.name) << " "
      << fmt("%.3f", (sp.end_us - sp.begin_us) / 1e3) << " ms</title></rect>\n";
  }
  int lx = label_w, ly = height - 16;
  for (const char* name : {"scatter", "replicate", "forward", "gather", "loss", "backward",
                           "reduce", "all-gather", "optimizer"}) {
    s << "<rect x='" << lx << "' y='" << ly - 10 << "' width='12' height='12' fill='"
      << letter_color(timeline_letter(name)) << "'/><text x='" << lx + 16 << "' y='" << ly << "'>"
      << name << "</text>\n";
    lx += 16 + 8 * static_cast<int>(std::string(name).size()) + 12;
  }
  s << "</svg>\n";
  return s.str();
}

// Spans of the parsed trace `j`; throws naming `path` when it is not a Chrome trace.
std::vector<TraceSpan> trace_spans(const json& j, const std::string& path) {
  FANOUT_CHECK(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array(), path,
               ": not a Chrome trace (no \"traceEvents\" array)");
  std::map<int64_t, std::string> lanes;
  for (const json& e : j["traceEvents"]) {
    if (e.is_object() && e.value("ph", "") == "M" && e.value("name", "") == "thread_name" &&
        e.contains("tid") && e["tid"].is_number_integer() && e.contains("args") &&
        e["args"].is_object() && e["args"].contains("name") && e["args"]["name"].is_string())
      lanes[e["tid"].get<int64_t>()] = e["args"]["name"].get<std::string>();
  }
  std::vector<TraceSpan> spans;
  for (const json& e : j["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    FANOUT_CHECK(e.contains("ts") && e["ts"].is_number() && e.contains("dur") &&
                     e["dur"].is_number() && e.contains("name") && e["name"].is_string(),
                 path, ": an \"X\" event without a name, ts or dur");
    const int64_t tid =
        e.contains("tid") && e["tid"].is_number_integer() ? e["tid"].get<int64_t>() : 0;
    auto lane = lanes.find(tid);
    // Within range, the casts below are defined and no difference of times overflows.
    const double ts_us = e["ts"].get<double>(), dur_us = e["dur"].get<double>();
    FANOUT_CHECK(std::fabs(ts_us) <= kMaxTraceUs && std::fabs(dur_us) <= kMaxTraceUs, path,
                 ": an \"X\" event's ts or dur is not a time in microseconds (", e["ts"].dump(),
                 ", ", e["dur"].dump(), ")");
    const auto ts = static_cast<int64_t>(ts_us);
    const auto dur = static_cast<int64_t>(std::max(0.0, dur_us));
    spans.push_back({lane != lanes.end() ? lane->second : "tid " + std::to_string(tid),
                     e["name"].get<std::string>(), ts, ts + dur});
  }
  return spans;
}

// The parsed bench JSON `j`, checked; throws naming `path` when it is not bench output.
const json& bench_checked(const json& j, const std::string& path) {
  FANOUT_CHECK(j.is_object() && j.contains("results") && j["results"].is_array(), path,
               ": not `fanout bench --json` output (no \"results\" array)");
  // The figures drawn: past kMaxBenchFigure their sums and ratios would not be finite.
  auto check_figure = [&](const json& v, const std::string& name) {
    FANOUT_CHECK(!v.is_number() || (v.get<double>() >= 0 && v.get<double>() <= kMaxBenchFigure),
                 path, ": ", name, " ", v.dump(), " is out of range (0 to ", kMaxBenchFigure, ")");
  };
  for (const json& r : j["results"]) {
    FANOUT_CHECK(r.is_object() && r.contains("mode") && r.contains("tokens_per_s") &&
                     r["tokens_per_s"].is_number(),
                 path, ": a result without \"mode\" and \"tokens_per_s\"");
    for (const char* key : {"tokens_per_s", "speedup", "step_s"})
      if (r.contains(key)) check_figure(r[key], std::string("\"") + key + "\"");
    if (r.contains("phases_s") && r["phases_s"].is_object())
      for (const auto& [phase, seconds] : r["phases_s"].items())
        check_figure(seconds, "\"phases_s\".\"" + phase + "\"");
  }
  return j;
}

json json_file_read(const std::string& path) {
  return json_parse(file_read_regular(path, kMaxJsonBytes), path);
}

// Note [Files found in a run directory]: trace*.json and bench*.json are picked up
// by name, so one may be another tool's file: JSON of another shape is named on
// the page. A file that is not JSON at all (cut short, damaged, nested past the
// limit) is an error naming it, as every JSON fanout reads.
std::string trace_section(const std::string& path) {
  std::string s = "<h3>Trace: " + h(fs::path(path).filename().string()) + "</h3>\n";
  const json doc = json_file_read(path);
  std::vector<TraceSpan> spans;
  try {
    spans = trace_spans(doc, path);
  } catch (const Error& e) {
    return s + "<p class='note'>not shown: " + h(e.what()) + "</p>\n";
  }
  if (spans.empty()) return s + "<p class='note'>the trace holds no spans</p>\n";
  int64_t t0 = spans.front().begin_us, t1 = spans.front().end_us;
  std::map<std::string, std::pair<int64_t, int64_t>> by_name;  // count, microseconds
  for (const TraceSpan& sp : spans) {
    t0 = std::min(t0, sp.begin_us);
    t1 = std::max(t1, sp.end_us);
    auto& [count, us] = by_name[sp.name];
    ++count;
    us += sp.end_us - sp.begin_us;
  }
  s += "<p class='note'>" + std::to_string(spans.size()) + " spans over " +
       fmt("%.1f", (t1 - t0) / 1e3) + " ms; open the file in ui.perfetto.dev for all of it</p>\n";
  s += trace_svg(spans);
  s += "<table><tr><th>span</th><th>count</th><th>total ms</th><th>mean ms</th></tr>\n";
  for (const auto& [name, cu] : by_name) {
    s += "<tr><td>" + h(name) + "</td><td class='num'>" + std::to_string(cu.first) +
         "</td><td class='num'>" + fmt("%.2f", cu.second / 1e3) + "</td><td class='num'>" +
         fmt("%.3f", cu.second / 1e3 / static_cast<double>(cu.first)) + "</td></tr>\n";
  }
  return s + "</table>\n";
}

// --- bench ------------------------------------------------------------------------

std::string bench_section(const std::string& path) {
  std::string s = "<h3>Bench: " + h(fs::path(path).filename().string()) + "</h3>\n";
  // Note [Files found in a run directory]
  const json doc = json_file_read(path);
  try {
    bench_checked(doc, path);
  } catch (const Error& e) {
    return s + "<p class='note'>not shown: " + h(e.what()) + "</p>\n";
  }
  std::vector<SvgRow> rows;
  std::string table =
      "<table><tr><th>mode</th><th>devices</th><th>precision</th><th>tokens/s</th>"
      "<th>speed-up</th><th>step ms</th><th>largest peak</th></tr>\n";
  auto num = [](const json& r, const char* key) {
    return r.contains(key) && r[key].is_number() ? r[key].get<double>() : NAN;
  };
  for (const json& r : doc["results"]) {
    SvgRow row;
    row.label = value_text(r["mode"]);
    if (r.contains("precision") && r["precision"] == "bf16") row.label += " bf16";
    row.tokens_per_s = std::isfinite(num(r, "tokens_per_s")) ? num(r, "tokens_per_s") : 0;
    row.speedup = std::isfinite(num(r, "speedup")) ? num(r, "speedup") : 0;
    row.has_phases = r.contains("phases_s") && r["phases_s"].is_object();
    if (row.has_phases) {
      const json& p = r["phases_s"];
      auto phase = [&](const char* k) { return std::isfinite(num(p, k)) ? num(p, k) : 0.0; };
      row.phases = {phase("scatter"), phase("replicate"), phase("forward"), phase("gather"),
                    phase("loss"),    phase("backward"),  phase("reduce"),  phase("optimizer")};
    }
    rows.push_back(row);
    double peak = 0;
    if (r.contains("peak_bytes") && r["peak_bytes"].is_object())
      for (const auto& [dev, b] : r["peak_bytes"].items())
        if (b.is_number()) peak = std::max(peak, b.get<double>());
    auto cell = [](const json& v) { return v.is_null() ? std::string() : h(value_text(v)); };
    table += "<tr><td>" + h(row.label) + "</td><td>" + cell(r.value("devices", json())) +
             "</td><td>" + cell(r.value("precision", json())) + "</td><td class='num'>" +
             fmt("%.0f", row.tokens_per_s) + "</td><td class='num'>" +
             (row.speedup > 0 ? fmt("%.2fx", row.speedup) : "") + "</td><td class='num'>" +
             (std::isfinite(num(r, "step_s")) ? fmt("%.1f", num(r, "step_s") * 1e3) : "") +
             "</td><td class='num'>" + (peak > 0 ? bytes_text(peak) : "") + "</td></tr>\n";
  }
  std::string subtitle;
  if (doc.contains("devices")) subtitle += value_text(doc["devices"]);
  if (doc.contains("batch_size") && doc.contains("seq_len"))
    subtitle +=
        ", global batch " + value_text(doc["batch_size"]) + " x " + value_text(doc["seq_len"]);
  return s + bench_svg("fanout bench", subtitle, rows) + table + "</table>\n";
}

// --- one run ----------------------------------------------------------------------

// Whether RUN_DIR/final or a RUN_DIR/step-N holds a trainer_state.json: a
// checkpoint is there, whether or not it can be read.
bool checkpoint_state_present(const std::string& run_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool step = name.rfind("step-", 0) == 0 && name.size() > 5 &&
                      name.find_first_not_of("0123456789", 5) == std::string::npos;
    if ((name == "final" || step) &&
        fs::exists(fs::symlink_status(e.path() / "trainer_state.json", ec)))
      return true;
  }
  return false;
}

std::string run_section(const std::string& dir, const LabeledRun& run, const std::string& id) {
  std::string s = "<section id='" + id + "'>\n<h2>" + h(run.label) + "</h2>\n<p class='path'>" +
                  h(dir) + "</p>\n<p class='summary'>" + h(run_curves_summary(run.metrics)) +
                  "</p>\n";
  s += run_curves_svg("", "", std::span(&run, 1), curve_metrics_parse("all"));
  s += "<h3>Settings</h3>\n";
  std::string from;
  json settings = report_run_settings(dir, &from);
  if (settings.is_null()) {
    s += "<p class='note'>no checkpoint in the run directory: its settings are not known</p>\n";
  } else {
    s += "<p class='note'>from " + h(from) + "/trainer_state.json</p>\n" + kv_block(settings);
    std::error_code ec;
    const std::string config = (fs::path(from) / "config.json").string();
    if (fs::exists(fs::symlink_status(config, ec))) {
      const json c = json_file_read(config);  // a damaged checkpoint is named, not skipped
      FANOUT_CHECK(c.is_object(), config, ": not a model config (not a JSON object)");
      s += "<h3>Model (config.json)</h3>\n" + kv_block(c);
    }
  }
  for (const std::string& t : files_named(dir, "trace")) s += trace_section(t);
  for (const std::string& b : files_named(dir, "bench")) s += bench_section(b);
  return s + "</section>\n";
}

}  // namespace

json report_run_settings(const std::string& run_dir, std::string* from) {
  std::string dir;
  try {
    dir = train::checkpoint_find_last(run_dir);
  } catch (const Error&) {
    if (checkpoint_state_present(run_dir)) throw;  // there is one, and it cannot be read
    return json();                                 // no checkpoint
  }
  const std::string path = (fs::path(dir) / "trainer_state.json").string();
  json j = json_file_read(path);
  FANOUT_CHECK(j.is_object() && j.contains("flags") && j["flags"].is_object(), path,
               ": not a trainer_state.json (no \"flags\" object)");
  json settings = j["flags"];
  for (const char* key : {"step", "seed", "tokens_seen"})
    if (j.contains(key)) settings[std::string("checkpoint ") + key] = j[key];
  if (from) *from = dir;
  return settings;
}

std::vector<TraceSpan> report_trace_read(const std::string& path) {
  return trace_spans(json_file_read(path), path);
}

json report_bench_read(const std::string& path) {
  json j = json_file_read(path);
  bench_checked(j, path);
  return j;
}

std::string report_html(const ReportOptions& o) {
  FANOUT_CHECK(!o.runs.empty(), "give at least one run directory");
  FANOUT_CHECK(o.labels.empty() || o.labels.size() == o.runs.size(), "--labels has ",
               o.labels.size(), " names for ", o.runs.size(), " runs");
  std::vector<LabeledRun> runs;
  for (size_t i = 0; i < o.runs.size(); ++i) {
    runs.push_back(
        {o.labels.empty() ? run_dir_label(o.runs[i]) : o.labels[i], metrics_read_run(o.runs[i])});
  }
  // Bench files given for the page are checked before anything is drawn.
  for (const std::string& b : o.bench_files) report_bench_read(b);
  std::string s = "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n<title>" +
                  h(o.title) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n<h1>" +
                  h(o.title) + "</h1>\n<nav>";
  for (size_t i = 0; i < runs.size(); ++i)
    s += "<a href='#run" + std::to_string(i) + "'>" + h(runs[i].label) + "</a>";
  s += "</nav>\n";
  if (runs.size() > 1) {
    s += "<h2>All runs</h2>\n" + run_curves_svg("", "", runs, curve_metrics_parse("all"));
  }
  for (size_t i = 0; i < runs.size(); ++i)
    s += run_section(o.runs[i], runs[i], "run" + std::to_string(i));
  if (!o.bench_files.empty()) {
    s += "<section id='bench'>\n<h2>Benchmarks</h2>\n";
    for (const std::string& b : o.bench_files) s += bench_section(b);
    s += "</section>\n";
  }
  return s + "</body>\n</html>\n";
}

}  // namespace fanout::presentation
