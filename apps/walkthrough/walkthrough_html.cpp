#include "apps/walkthrough/walkthrough_html.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "apps/presentation/step_times.h"
#include "apps/presentation/svg_chart.h"
#include "apps/presentation/text_format.h"
#include "apps/presentation/trace_timeline.h"
#include "engine/core/allocator.h"
#include "engine/core/cuda_runtime.h"

namespace fanout::walkthrough {

namespace {

using presentation::strf;
using presentation::xml_escape;

std::string h(const std::string& s) {
  return xml_escape(s);
}

// A coordinate: finite, one decimal.
std::string c(double v) {
  return strf("%.1f", std::isfinite(v) ? v : 0.0);
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

const char* const kCss = R"(
body { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; margin: 24px auto; color: #222;
       max-width: 1160px; padding: 0 16px; line-height: 1.4; }
h1 { font-size: 24px; margin-bottom: 4px; }
h2 { font-size: 19px; border-bottom: 2px solid #4c78a8; padding-bottom: 4px; margin-top: 40px; }
.info { font-size: 13px; color: #444; margin: 2px 0; overflow-wrap: anywhere; }
code { background: #f3f6fa; padding: 1px 5px; border-radius: 3px; font-size: 13px;
       overflow-wrap: anywhere; }
svg { max-width: 100%; height: auto; display: block; margin: 8px 0; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 12px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f3f6fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
nav { font-size: 13px; margin: 8px 0; }
nav a { margin-right: 12px; }
.explain { font-size: 14px; margin: 6px 0; max-width: 1000px; }
.note { color: #a33; font-size: 13px; }
.caption { color: #666; font-size: 12px; margin: 0 0 4px; }
)";

// --- colours ----------------------------------------------------------------------

const char* kind_color(MemTag t) {
  switch (t) {
    case MemTag::params:
      return "#4c78a8";
    case MemTag::grads:
      return "#f58518";
    case MemTag::optimizer:
      return "#54a24b";
    case MemTag::activations:
      return "#e45756";
    case MemTag::comm:
      return "#72b7b2";
    case MemTag::data:
      return "#b279a2";
    default:
      return "#9d755d";
  }
}

// What the page calls each allocator tag.
const char* kind_name(MemTag t) {
  if (t == MemTag::params) return "weights";
  if (t == MemTag::grads) return "gradients";
  return mem_tag_name(t);
}

const std::vector<MemTag>& drawn_tags() {
  static const std::vector<MemTag> tags = {MemTag::params,      MemTag::grads, MemTag::optimizer,
                                           MemTag::activations, MemTag::comm,  MemTag::data,
                                           MemTag::other};
  return tags;
}

const char* move_color(const std::string& kind) {
  if (kind == "scatter") return "#7f7f7f";
  if (kind == "broadcast") return "#4c78a8";
  if (kind == "gather") return "#e45756";
  if (kind == "reduce" || kind == "reduce-scatter") return "#f58518";
  if (kind == "all-gather") return "#54a24b";
  if (kind == "all-reduce") return "#b279a2";
  return "#d62728";  // stage to stage
}

// Whether a span is a pipeline action: F3, B0, I1, W2 (a micro-batch's forward,
// backward, backward-input or backward-weight on its stage).
bool is_action(const std::string& name) {
  if (name.size() < 2 || std::string("FBIW").find(name[0]) == std::string::npos) return false;
  return std::all_of(name.begin() + 1, name.end(),
                     [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
}

// A span's phase: the data-parallel phases by name, the collectives under any
// of their names, a pipeline action by its letter.
std::string phase_of(const std::string& name) {
  static const std::map<std::string, std::string> phases = {
      {"scatter", "scatter"},
      {"replicate", "broadcast"},
      {"broadcast", "broadcast"},
      {"forward", "forward"},
      {"gather", "gather"},
      {"loss", "loss"},
      {"backward", "backward"},
      {"backward input", "backward (input)"},
      {"backward weight", "backward (weights)"},
      {"reduce", "reduce"},
      {"accumulate shard", "reduce"},
      {"reduce-scatter", "reduce"},
      {"optimizer", "optimizer"},
      {"all-gather", "all-gather"},
      {"all-gather params", "all-gather"},
      {"gather weights", "all-gather"},
      {"tp all-gather", "all-gather"},
      {"all-reduce", "all-reduce"},
      {"tp all-reduce", "all-reduce"},
  };
  if (auto it = phases.find(name); it != phases.end()) return it->second;
  if (is_action(name)) {
    switch (name[0]) {
      case 'F':
        return "forward";
      case 'B':
        return "backward";
      case 'I':
        return "backward (input)";
      default:
        return "backward (weights)";
    }
  }
  return "other";
}

const char* phase_color(const std::string& phase) {
  static const std::map<std::string, const char*> colors = {{"scatter", "#8dd3c7"},
                                                            {"broadcast", "#d9c84a"},
                                                            {"forward", "#80b1d3"},
                                                            {"gather", "#fb8072"},
                                                            {"loss", "#fdb462"},
                                                            {"backward", "#9e8fd6"},
                                                            {"backward (input)", "#c9c3ee"},
                                                            {"backward (weights)", "#f4a6cf"},
                                                            {"reduce", "#8cc63f"},
                                                            {"optimizer", "#e7969c"},
                                                            {"all-gather", "#1b9e77"},
                                                            {"all-reduce", "#e7298a"}};
  auto it = colors.find(phase);
  return it == colors.end() ? "#cccccc" : it->second;
}

// --- the summary ------------------------------------------------------------------

std::string fmt_rate(double v) {
  if (!(v > 0) || !std::isfinite(v)) return "-";
  if (v >= 1e6) return strf("%.2fM", v / 1e6);
  if (v >= 1e3) return strf("%.1fk", v / 1e3);
  return strf("%.0f", v);
}

std::string summary_svg(const std::vector<PageSection>& sections) {
  const int label_w = 120, panel_w = 310, gap = 16, row_h = 26, top = 44;
  const int width = label_w + 3 * panel_w + 2 * gap + 10;
  const int height = top + row_h * static_cast<int>(sections.size()) + 12;
  double max_rate = 0, max_bytes = 0, max_moved = 0;
  size_t max_devices = 1;
  for (const PageSection& s : sections) {
    max_rate = std::max(max_rate, s.tokens_per_s());
    max_moved = std::max(max_moved, static_cast<double>(s.bytes_moved()));
    max_devices = std::max(max_devices, s.memory.size());
    for (const presentation::DevicePeak& d : s.memory)
      max_bytes = std::max(max_bytes, static_cast<double>(d.peak_bytes));
  }
  std::ostringstream o;
  o << "<svg class=\"summary\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << width << " "
    << height << "\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  const char* titles[] = {"tokens/s (median of the timed steps)", "peak memory per device",
                          "bytes moved between devices per step"};
  // The devices' colours in the memory panel, in the order of the first section's.
  std::vector<std::string> devices;
  for (const PageSection& s : sections)
    for (const presentation::DevicePeak& d : s.memory)
      if (std::find(devices.begin(), devices.end(), d.device) == devices.end())
        devices.push_back(d.device);
  int lx = label_w + panel_w + gap;
  for (size_t d = 0; d < devices.size() && d < 8; ++d) {
    o << "<rect x=\"" << lx << "\" y=\"22\" width=\"10\" height=\"10\" fill=\""
      << presentation::chart_color(static_cast<int>(d)) << "\"/><text x=\"" << lx + 13
      << "\" y=\"31\" font-size=\"11\">" << h(devices[d]) << "</text>\n";
    lx += 13 + 7 * static_cast<int>(devices[d].size()) + 10;
  }
  for (int p = 0; p < 3; ++p) {
    const int x0 = label_w + p * (panel_w + gap);
    o << "<text x=\"" << x0 << "\" y=\"16\" font-weight=\"bold\">" << titles[p] << "</text>\n";
    o << "<line x1=\"" << x0 << "\" y1=\"" << top - 8 << "\" x2=\"" << x0 << "\" y2=\""
      << height - 8 << "\" stroke=\"#999\"/>\n";
  }
  const double bar_max = panel_w - 90;  // room for the value after the bar
  for (size_t i = 0; i < sections.size(); ++i) {
    const PageSection& s = sections[i];
    const int y = top + static_cast<int>(i) * row_h;
    o << "<text x=\"" << label_w - 8 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">"
      << h(s.name) << "</text>\n";
    auto bar = [&](int panel, double value, double max, double by, double bh, const char* color,
                   const std::string& text) {
      const int x0 = label_w + panel * (panel_w + gap);
      const double w = max > 0 && value > 0 ? std::max(1.0, value / max * bar_max) : 0;
      o << "<rect x=\"" << x0 << "\" y=\"" << c(by) << "\" width=\"" << c(w) << "\" height=\""
        << c(bh) << "\" fill=\"" << color << "\"/>";
      if (!text.empty())
        o << "<text x=\"" << c(x0 + w + 4) << "\" y=\"" << c(by + bh / 2 + 4)
          << "\" font-size=\"11\">" << h(text) << "</text>";
      o << "\n";
    };
    const double rate = s.tokens_per_s();
    bar(0, rate, max_rate, y + 3, 18, "#4c78a8", fmt_rate(rate));
    const size_t nd = std::max<size_t>(1, s.memory.size());
    const double bh = 18.0 / static_cast<double>(nd);
    size_t biggest = 0;
    for (size_t d = 0; d < s.memory.size(); ++d)
      if (s.memory[d].peak_bytes > s.memory[biggest].peak_bytes) biggest = d;
    for (size_t d = 0; d < s.memory.size(); ++d)
      bar(1, static_cast<double>(s.memory[d].peak_bytes), max_bytes,
          y + 3 + bh * static_cast<double>(d), std::max(1.0, bh - 1),
          presentation::chart_color(static_cast<int>(
              std::find(devices.begin(), devices.end(), s.memory[d].device) - devices.begin())),
          d == biggest ? bytes_str(s.memory[d].peak_bytes) : "");
    bar(2, static_cast<double>(s.bytes_moved()), max_moved, y + 3, 18, "#b279a2",
        bytes_str(static_cast<size_t>(s.bytes_moved())));
  }
  o << "</svg>\n";
  return o.str();
}

std::string summary_table(const std::vector<PageSection>& sections) {
  std::ostringstream o;
  o << "<table class=\"summary\"><tr><th>mode</th><th>tokens/s</th><th>step (median)</th>"
       "<th>peak memory per device</th><th>moved per step</th></tr>\n";
  for (const PageSection& s : sections) {
    const presentation::StepTimes t = presentation::step_times_summarize(s.timed_ms);
    std::string peaks;
    for (const presentation::DevicePeak& d : s.memory)
      peaks += (peaks.empty() ? "" : ", ") + d.device + " " + bytes_str(d.peak_bytes);
    o << "<tr><td><a href=\"#" << h(s.id) << "\">" << h(s.name) << "</a></td><td class=\"num\">"
      << fmt_rate(s.tokens_per_s()) << "</td><td class=\"num\">"
      << (t.samples ? strf("%.2f ms", t.median) : "-") << "</td><td>" << h(peaks)
      << "</td><td class=\"num\">" << bytes_str(static_cast<size_t>(s.bytes_moved()))
      << "</td></tr>\n";
  }
  o << "</table>\n";
  for (const PageSection& s : sections)
    if (s.name == "ddp" && s.step_number > 0)
      o << "<p class=\"caption\">ddp's ranks ran here as threads of this process, each "
           "with its own Gloo connection over the loopback, on the same cores as the others: "
           "fanout bench --modes ddp times real processes.</p>\n";
  return o.str();
}

// --- a section's diagram ----------------------------------------------------------

// `text` cut into lines of at most `width` characters, at spaces.
std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string word, line;
  while (in >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

const presentation::DevicePeak* peak_of(const PageSection& s, const std::string& device) {
  for (const presentation::DevicePeak& d : s.memory)
    if (d.device == device) return &d;
  return nullptr;
}

// The largest sum of a device's kinds on the page: the memory bars' common scale.
double bar_scale_bytes(const std::vector<PageSection>& sections) {
  double m = 1;
  for (const PageSection& s : sections)
    for (const presentation::DevicePeak& d : s.memory) {
      double sum = 0;
      for (MemTag t : drawn_tags()) sum += static_cast<double>(d.tag(t));
      m = std::max(m, sum);
    }
  return m;
}

constexpr int kDiagramW = 1100, kLabelW = 250, kAreaX = 262, kAreaW = 828;

// `id` with anything but letters, digits and '-' replaced: a marker's id.
std::string marker_id(const std::string& id) {
  std::string out = "arrow-";
  for (char ch : id) out += std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' ? ch : '_';
  return out;
}

std::string diagram_svg(const PageSection& s, double scale_bytes) {
  const int n = static_cast<int>(s.boxes.size());
  if (n == 0) return "<p class=\"note\">no devices to draw</p>\n";
  const int gap = 18;
  const int box_w = std::min(250, (kAreaW - gap * (n - 1)) / std::max(n, 1));
  const int used = n * box_w + (n - 1) * gap;
  const int x_first = kAreaX + (kAreaW - used) / 2;
  const bool roomy = box_w >= 150;
  const int host_top = 34, host_bottom = 70, box_top = 118;
  const int kinds_h = roomy ? 14 * static_cast<int>(drawn_tags().size()) : 14;
  const int box_h = 70 + kinds_h + 8;
  const int box_bottom = box_top + box_h;
  auto box_x = [&](int b) { return x_first + b * (box_w + gap); };

  std::vector<const PageMove*> host_moves, moves;
  for (const PageMove& m : s.moves)
    (std::find(m.from.begin(), m.from.end(), PageMove::kHost) != m.from.end() ? host_moves : moves)
        .push_back(&m);
  // Each lane's label lines, and its height.
  std::vector<std::vector<std::string>> whats;
  std::vector<int> lane_y;
  int y = box_bottom + 44;
  for (const PageMove* m : moves) {
    whats.push_back(wrap(m->what, 38));
    lane_y.push_back(y);
    y += std::max(50, 22 + 14 * static_cast<int>(whats.back().size()));
  }
  const int height = y + 4;

  std::ostringstream o;
  o << "<svg class=\"diagram\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << kDiagramW
    << " " << height << "\" width=\"" << kDiagramW << "\" height=\"" << height
    << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
    << "<defs><marker id=\"" << marker_id(s.id)
    << "\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
       "orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"context-stroke\"/>"
       "</marker></defs>\n";
  const std::string marker = "url(#" + marker_id(s.id) + ")";
  o << "<text x=\"0\" y=\"16\" font-weight=\"bold\">"
    << (s.step_number > 0 ? strf("step %d", s.step_number) : std::string("one step, computed"))
    << ": what each device holds and what moved</text>\n";

  // The host and the scatter.
  const int host_x0 = box_x(0), host_x1 = box_x(n - 1) + box_w;
  o << "<rect x=\"" << host_x0 << "\" y=\"" << host_top << "\" width=\"" << host_x1 - host_x0
    << "\" height=\"" << host_bottom - host_top
    << "\" rx=\"6\" fill=\"#f7f7f7\" stroke=\"#999\"/><text x=\"" << (host_x0 + host_x1) / 2
    << "\" y=\"" << host_top + 22 << "\" text-anchor=\"middle\">host: "
    << h(strf("the batch, %lld tokens", static_cast<long long>(s.tokens_per_step))) << "</text>\n";
  for (const PageMove* m : host_moves) {
    o << "<g class=\"move\" data-kind=\"" << h(m->kind) << "\" data-bytes=\"" << m->bytes
      << "\"><title>"
      << h(m->kind + ": " + m->what + ", " + with_commas(m->bytes) + " bytes (" + m->counter + ")")
      << "</title>";
    for (int b : m->to) {
      if (b < 0 || b >= n) continue;
      const int x = box_x(b) + box_w / 2;
      o << "<line x1=\"" << x << "\" y1=\"" << host_bottom << "\" x2=\"" << x << "\" y2=\""
        << box_top - 2 << "\" stroke=\"" << move_color(m->kind)
        << "\" stroke-width=\"2\" marker-end=\"" << marker << "\"/>";
    }
    o << "<text x=\"0\" y=\"" << host_bottom + 18 << "\" font-weight=\"bold\" fill=\""
      << move_color(m->kind) << "\">" << h(m->kind) << " <tspan class=\"bytes\">"
      << h(bytes_str(static_cast<size_t>(m->bytes))) << "</tspan></text>";
    int line = 0;
    for (const std::string& w : wrap(m->what, 38))
      o << "<text x=\"0\" y=\"" << host_bottom + 33 + 14 * line++
        << "\" fill=\"#555\" font-size=\"11\">" << h(w) << "</text>";
    o << "</g>\n";
  }

  // The boxes: label, device, role, the memory bar to the page's scale, the kinds.
  const double bar_w = box_w - 16;
  std::set<std::string> drawn;
  for (int b = 0; b < n; ++b) {
    const PageBox& box = s.boxes[b];
    const int x = box_x(b);
    o << "<rect x=\"" << x << "\" y=\"" << box_top << "\" width=\"" << box_w << "\" height=\""
      << box_h << "\" rx=\"6\" fill=\"white\" stroke=\"#555\"/>\n";
    o << "<text x=\"" << x + 8 << "\" y=\"" << box_top + 17 << "\" font-weight=\"bold\">"
      << h(box.label) << "</text><text x=\"" << x + 8 << "\" y=\"" << box_top + 32 << "\">"
      << h(box.device) << (box.role.empty() || !roomy ? "" : " · " + h(box.role)) << "</text>\n";
    const presentation::DevicePeak* p = peak_of(s, box.device);
    if (p == nullptr) continue;
    if (!drawn.insert(box.device).second) {
      o << "<text x=\"" << x + 8 << "\" y=\"" << box_top + 56 << "\" fill=\"#666\">"
        << "shares " << h(box.device) << "'s memory</text>\n";
      continue;
    }
    // A piece of the bar per kind (none for 0 bytes), its bytes in data and title.
    double at = x + 8;
    for (MemTag t : drawn_tags()) {
      const double w = static_cast<double>(p->tag(t)) / scale_bytes * bar_w;
      o << "<g class=\"hold\" data-device=\"" << h(box.device) << "\" data-kind=\"" << kind_name(t)
        << "\" data-bytes=\"" << p->tag(t) << "\"><title>" << kind_name(t) << " "
        << h(bytes_str(p->tag(t))) << "</title>";
      if (w > 0)
        o << "<rect x=\"" << c(at) << "\" y=\"" << box_top + 42 << "\" width=\"" << c(w)
          << "\" height=\"16\" fill=\"" << kind_color(t) << "\"/>";
      o << "</g>";
      at += std::max(0.0, w);
    }
    o << "<rect x=\"" << x + 8 << "\" y=\"" << box_top + 42 << "\" width=\"" << c(bar_w)
      << "\" height=\"16\" fill=\"none\" stroke=\"#ccc\"/>\n";
    o << "<text x=\"" << x + 8 << "\" y=\"" << box_top + 74 << "\">peak "
      << h(bytes_str(p->peak_bytes)) << "</text>\n";
    int line = 0;
    for (MemTag t : drawn_tags()) {
      if (!roomy) break;
      const int ty = box_top + 90 + 14 * line;
      o << "<rect x=\"" << x + 8 << "\" y=\"" << ty - 9 << "\" width=\"9\" height=\"9\" fill=\""
        << kind_color(t) << "\"/><text x=\"" << x + 22 << "\" y=\"" << ty << "\" font-size=\"11\">"
        << kind_name(t) << " " << h(bytes_str(p->tag(t))) << "</text>\n";
      ++line;
    }
  }

  // The moves between devices: a lane each, its label on the left.
  const int nm = static_cast<int>(moves.size());
  for (int i = 0; i < nm; ++i) {
    const PageMove& m = *moves[i];
    const int ly = lane_y[i];
    const int offset = static_cast<int>((i - (nm - 1) / 2.0) * 12);
    const char* color = move_color(m.kind);
    const std::string dash = m.bytes == 0 ? "\" stroke-dasharray=\"5,4" : "";
    o << "<g class=\"move\" data-kind=\"" << h(m.kind) << "\" data-bytes=\"" << m.bytes
      << "\"><title>"
      << h(m.kind + ": " + m.what + ", " + with_commas(m.bytes) + " bytes (" + m.counter + ")")
      << "</title>\n";
    std::set<int> parts(m.from.begin(), m.from.end());
    parts.insert(m.to.begin(), m.to.end());
    int lo = kDiagramW, hi = 0;
    for (int b : parts) {
      if (b < 0 || b >= n) continue;
      const int x = box_x(b) + box_w / 2 + offset;
      lo = std::min(lo, x), hi = std::max(hi, x);
      const bool sends = std::count(m.from.begin(), m.from.end(), b) > 0;
      const bool gets = std::count(m.to.begin(), m.to.end(), b) > 0;
      // Drawn from the lane up to the box: the end marks what the box receives,
      // the start what it sends.
      o << "<line x1=\"" << x << "\" y1=\"" << ly << "\" x2=\"" << x << "\" y2=\"" << box_bottom + 2
        << "\" stroke=\"" << color << "\" stroke-width=\"2" << dash << "\""
        << (gets ? " marker-end=\"" + marker + "\"" : "")
        << (sends ? " marker-start=\"" + marker + "\"" : "") << "/>";
    }
    if (hi > lo)
      o << "<line x1=\"" << lo << "\" y1=\"" << ly << "\" x2=\"" << hi << "\" y2=\"" << ly
        << "\" stroke=\"" << color << "\" stroke-width=\"3" << dash << "\"/>";
    o << "\n<text x=\"0\" y=\"" << ly - 4 << "\" font-weight=\"bold\" fill=\"" << color << "\">"
      << h(m.kind) << " <tspan class=\"bytes\">" << h(bytes_str(static_cast<size_t>(m.bytes)))
      << "</tspan></text>";
    for (size_t k = 0; k < whats[i].size(); ++k)
      o << "<text x=\"0\" y=\"" << ly + 11 + 14 * static_cast<int>(k)
        << "\" fill=\"#555\" font-size=\"11\">" << h(whats[i][k]) << "</text>";
    o << "</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string kinds_legend() {
  std::string s =
      "<p class=\"caption\">memory bars: each kind's peak during the mode, to one "
      "scale for the whole page: ";
  for (MemTag t : drawn_tags())
    s += strf("<span style=\"color:%s\">&#9632;</span> %s &#160;", kind_color(t), kind_name(t));
  return s + "</p>\n";
}

// --- a section's timeline -----------------------------------------------------------

std::string timeline_svg(const PageSection& s) {
  std::vector<TraceSpan> spans = s.step.spans;
  if (spans.empty()) return "<p class=\"note\">no timeline: this step was not traced</p>\n";
  const std::vector<std::string> lanes = presentation::timeline_lanes(spans);
  int64_t t0 = s.step.t0_us, t1 = s.step.t1_us;
  for (const TraceSpan& sp : spans) t0 = std::min(t0, sp.begin_us), t1 = std::max(t1, sp.end_us);
  t1 = std::max(t1, t0 + 1);
  const int label_w = 190, plot_w = kDiagramW - label_w - 40, row_h = 22, top = 26;
  const int axis_y = top + row_h * static_cast<int>(lanes.size()) + 4;
  std::vector<std::string> phases;
  for (const TraceSpan& sp : spans) {
    const std::string p = phase_of(sp.name);
    if (std::find(phases.begin(), phases.end(), p) == phases.end()) phases.push_back(p);
  }
  // Legend entries laid out in rows that fit.
  std::vector<std::pair<int, int>> at;
  int lx = label_w, ly = axis_y + 40;
  for (const std::string& p : phases) {
    const int w = 22 + 7 * static_cast<int>(p.size()) + 14;
    if (lx + w > kDiagramW) lx = label_w, ly += 18;
    at.push_back({lx, ly});
    lx += w;
  }
  const int height = ly + 12;
  const double scale = plot_w / static_cast<double>(t1 - t0);
  std::ostringstream o;
  o << "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << kDiagramW
    << " " << height << "\" width=\"" << kDiagramW << "\" height=\"" << height
    << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
    << "<text x=\"0\" y=\"16\" font-weight=\"bold\">"
    << h(strf("step %d's timeline: %.2f ms, one lane per stream", s.step_number, (t1 - t0) / 1e3))
    << "</text>\n";
  // Longest first, so that a short span drawn over a long one stays visible.
  std::stable_sort(spans.begin(), spans.end(), [](const TraceSpan& a, const TraceSpan& b) {
    return a.end_us - a.begin_us > b.end_us - b.begin_us;
  });
  for (size_t i = 0; i < lanes.size(); ++i) {
    const int y = top + static_cast<int>(i) * row_h;
    o << "<g class=\"lane\" data-lane=\"" << h(lanes[i]) << "\"><rect x=\"" << label_w << "\" y=\""
      << y << "\" width=\"" << plot_w << "\" height=\"" << row_h - 2 << "\" fill=\""
      << (i % 2 ? "#fafafa" : "#f2f2f2") << "\"/><text x=\"" << label_w - 8 << "\" y=\"" << y + 14
      << "\" text-anchor=\"end\">" << h(lanes[i]) << "</text>\n";
    for (const TraceSpan& sp : spans) {
      if (sp.lane != lanes[i]) continue;
      const double x = label_w + (sp.begin_us - t0) * scale;
      const double w = std::max(1.0, (sp.end_us - sp.begin_us) * scale);
      const std::string phase = phase_of(sp.name);
      o << "<rect class=\"span\" x=\"" << c(x) << "\" y=\"" << y + 2 << "\" width=\"" << c(w)
        << "\" height=\"" << row_h - 6 << "\" fill=\"" << phase_color(phase) << "\"><title>"
        << h(sp.name + strf(": %.3f ms", (sp.end_us - sp.begin_us) / 1e3)) << "</title></rect>\n";
    }
    // A pipeline action's name over everything inside it, where it fits.
    for (const TraceSpan& sp : spans) {
      const double w = (sp.end_us - sp.begin_us) * scale;
      if (sp.lane != lanes[i] || !is_action(sp.name) ||
          w < 8.0 * static_cast<double>(sp.name.size()) + 4)
        continue;
      o << "<text x=\"" << c(label_w + (sp.begin_us - t0) * scale + w / 2) << "\" y=\"" << y + 14
        << "\" text-anchor=\"middle\" font-size=\"10\">" << h(sp.name) << "</text>\n";
    }
    o << "</g>\n";
  }
  o << "<line x1=\"" << label_w << "\" y1=\"" << axis_y << "\" x2=\"" << label_w + plot_w
    << "\" y2=\"" << axis_y << "\" stroke=\"#999\"/>\n";
  const double ms = (t1 - t0) / 1e3;
  for (double t : presentation::chart_ticks(0, ms, 8)) {
    const double x = label_w + t / ms * plot_w;
    o << "<line x1=\"" << c(x) << "\" y1=\"" << axis_y << "\" x2=\"" << c(x) << "\" y2=\""
      << axis_y + 5 << "\" stroke=\"#999\"/><text x=\"" << c(x) << "\" y=\"" << axis_y + 18
      << "\" text-anchor=\"middle\" font-size=\"11\">" << h(strf("%g ms", t)) << "</text>\n";
  }
  for (size_t i = 0; i < phases.size(); ++i)
    o << "<rect x=\"" << at[i].first << "\" y=\"" << at[i].second - 10
      << "\" width=\"12\" height=\"12\" fill=\"" << phase_color(phases[i]) << "\"/><text x=\""
      << at[i].first + 16 << "\" y=\"" << at[i].second << "\" font-size=\"11\">" << h(phases[i])
      << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

std::string section_html(const PageSection& s, double scale_bytes) {
  std::ostringstream o;
  o << "<section class=\"mode\" id=\"" << h(s.id) << "\">\n<h2>" << h(s.title) << "</h2>\n"
    << "<p class=\"info\">run it: <code>" << h(s.flags) << "</code></p>\n";
  for (const std::string& e : s.explain) o << "<p class=\"explain\">" << h(e) << "</p>\n";
  const presentation::StepTimes t = presentation::step_times_summarize(s.timed_ms);
  if (s.step_number > 0)
    o << "<p class=\"info\">"
      << h(strf("loss %.5f at step %d", s.loss, s.step_number) +
           (t.samples ? strf("; %s tokens/s at a median step of %.2f ms over %d timed steps",
                             fmt_rate(s.tokens_per_s()).c_str(), t.median, t.samples)
                      : std::string()))
      << "</p>\n";
  o << diagram_svg(s, scale_bytes) << kinds_legend();
  if (!s.note.empty()) o << "<p class=\"note\">" << h(s.note) << "</p>\n";
  o << timeline_svg(s) << "</section>\n";
  return o.str();
}

std::string describe_device(const Device& d) {
  if (d.is_cuda()) {
    const CudaDeviceInfo info = cuda_device_info(d.index);
    return d.str() + " (" + info.name + ", " + bytes_str(info.total_bytes) + ")";
  }
  return d.str();
}

}  // namespace

PageInfo walkthrough_page_info(const WalkthroughOptions& o, int64_t parameters,
                               const std::string& command) {
  PageInfo p;
  p.command = command;
  std::vector<Device> distinct;
  for (const Device& d : o.devices)
    if (std::find(distinct.begin(), distinct.end(), d) == distinct.end()) distinct.push_back(d);
  for (const Device& d : distinct)
    p.devices += (p.devices.empty() ? "" : ", ") + describe_device(d);
  bool cpu = false;
  for (const Device& d : distinct) cpu = cpu || d.is_cpu();
  if (cpu)
    p.devices += strf(" (CPU devices share this machine's %u hardware threads)",
                      std::max(1u, std::thread::hardware_concurrency()));
  p.build = std::string("fanout ") + FANOUT_VERSION + ", " +
#if defined(__clang__)
            "clang " __clang_version__
#elif defined(__GNUC__)
            "g++ " __VERSION__
#else
            "an unknown compiler"
#endif
            + (cuda_compiled() ? ", with the CUDA backend" : ", CPU backend only") +
#ifdef NDEBUG
            ", optimised"
#else
            ", debug (assertions on)"
#endif
      ;
  const models::LlamaConfig& c = o.config;
  p.model = strf(
      "Llama, %lld layers, hidden %lld, vocabulary %lld: %lld parameters; a batch of "
      "%lld rows x %lld tokens",
      static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
      static_cast<long long>(c.vocab_size), static_cast<long long>(parameters),
      static_cast<long long>(o.batch_size), static_cast<long long>(o.seq_len));
  p.trace_path = o.trace_path;
  return p;
}

std::string walkthrough_html(const std::vector<PageSection>& sections, const PageInfo& info) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>fanout walkthrough</title><style>" << kCss << "</style></head><body>\n"
    << "<h1>fanout walkthrough: one training step in every mode</h1>\n"
    << "<p class=\"info\">devices: " << h(info.devices) << "</p>\n"
    << "<p class=\"info\">build: " << h(info.build) << "</p>\n"
    << "<p class=\"info\">model: " << h(info.model) << "</p>\n"
    << "<p class=\"info\">made by: <code>" << h(info.command) << "</code>"
    << (info.trace_path.empty() ? ""
                                : "; the whole trace: <code>" + h(info.trace_path) +
                                      "</code> (open it in ui.perfetto.dev)")
    << "</p>\n<p class=\"explain\">Every section below ran on these devices, from the same "
       "initial weights on the same batch. Its diagram shows the step's devices, what each "
       "held at its peak, and every move between them labelled with the bytes the engine "
       "counted; its timeline shows the step as the trace recorded it, one lane per stream.</p>\n"
    << "<nav>";
  for (const PageSection& s : sections)
    o << "<a href=\"#" << h(s.id) << "\">" << h(s.name) << "</a>";
  o << "</nav>\n<h2 id=\"summary\">Summary</h2>\n"
    << summary_svg(sections) << summary_table(sections);
  const double scale = bar_scale_bytes(sections);
  for (const PageSection& s : sections) o << section_html(s, scale);
  o << "</body></html>\n";
  return o.str();
}

}  // namespace fanout::walkthrough
