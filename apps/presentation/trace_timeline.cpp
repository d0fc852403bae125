#include "apps/presentation/trace_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

namespace fanout::presentation {

namespace {

struct Phase {
  char letter;
  const char* what;
  const char* ansi;  // colour of the letter
};
const Phase kPhases[] = {
    {'S', "scatter", "\033[36m"},    {'P', "replicate/broadcast", "\033[96m"},
    {'F', "forward", "\033[32m"},    {'L', "loss", "\033[35m"},
    {'G', "gather", "\033[33m"},     {'B', "backward", "\033[34m"},
    {'R', "reduce", "\033[31m"},     {'O', "optimizer", "\033[1m"},
    {'A', "all-gather", "\033[91m"},
};
constexpr const char* kReset = "\033[0m";

const char* ansi_of(char letter) {
  for (const Phase& p : kPhases)
    if (p.letter == letter) return p.ansi;
  return "";
}

// Sort key of a lane: "host" first, then (device kind, index, replica), then
// the lane's role on that device.
std::tuple<int, std::string, int, int, int> lane_key(const std::string& lane) {
  if (lane == "host") return {0, "", 0, 0, 0};
  size_t space = lane.find(' ');
  std::string dev = lane.substr(0, space),
              what = space == std::string::npos ? "" : lane.substr(space + 1);
  std::string kind = dev.substr(0, dev.find(':'));
  int index = 0, replica = -1;
  std::sscanf(dev.c_str() + std::min(dev.size(), kind.size() + 1), "%d#%d", &index, &replica);
  static const std::map<std::string, int> roles = {
      {"host", 0}, {"output", 1}, {"compute", 2}, {"comm", 3}};
  auto it = roles.find(what);
  return {1, kind, index, replica, it == roles.end() ? 4 : it->second};
}

std::string ms_str(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", us / 1e3);
  return buf;
}

}  // namespace

char timeline_letter(const std::string& name) {
  if (name == "scatter") return 'S';
  if (name == "replicate" || name == "broadcast") return 'P';
  if (name == "forward") return 'F';
  if (name == "loss") return 'L';
  if (name == "gather") return 'G';
  if (name == "backward") return 'B';
  if (name.rfind("reduce", 0) == 0) return 'R';
  if (name.rfind("all-gather", 0) == 0) return 'A';
  if (name == "optimizer") return 'O';
  return '#';
}

std::string timeline_legend(bool color) {
  std::string out = "legend:";
  for (const Phase& p : kPhases) {
    out += "  ";
    if (color) out += p.ansi;
    out += p.letter;
    if (color) out += kReset;
    out += std::string(" ") + p.what;
  }
  return out + "  . idle";
}

std::vector<std::string> timeline_lanes(const std::vector<TraceSpan>& spans) {
  std::vector<std::string> lanes;
  for (const TraceSpan& s : spans)
    if (std::find(lanes.begin(), lanes.end(), s.lane) == lanes.end()) lanes.push_back(s.lane);
  std::sort(lanes.begin(), lanes.end(),
            [](const std::string& a, const std::string& b) { return lane_key(a) < lane_key(b); });
  return lanes;
}

std::string timeline_render(const std::vector<TraceSpan>& all, int64_t t0, int64_t t1, int width,
                            bool color) {
  width = std::max(width, 1);
  t1 = std::max(t1, t0 + 1);
  std::vector<TraceSpan> spans;
  for (const TraceSpan& s : all)
    if (s.end_us >= t0 && s.begin_us < t1) spans.push_back(s);
  std::vector<std::string> lanes = timeline_lanes(spans);
  size_t label = 4;
  for (const std::string& l : lanes) label = std::max(label, l.size());
  double dt = static_cast<double>(t1 - t0) / width;
  // Clamped in double before the cast, which is undefined for values past int (a
  // span that began long before the window).
  auto column = [&](double v) { return static_cast<int>(std::clamp(v, -1.0, double(width))); };

  std::string out;
  for (const std::string& lane : lanes) {
    std::string row(width, '.');
    std::vector<int64_t> best(width, -1);  // duration of the span drawn in each column
    for (const TraceSpan& s : spans) {
      if (s.lane != lane) continue;
      int64_t dur = std::max<int64_t>(0, s.end_us - s.begin_us);
      int c0 = column(std::floor((s.begin_us - t0) / dt));
      // the last column the span reaches into (a zero-length span: its first)
      int c1 = dur > 0 ? column(std::ceil((s.end_us - t0) / dt)) - 1 : c0;
      c0 = std::clamp(c0, 0, width - 1), c1 = std::clamp(std::max(c1, c0), 0, width - 1);
      for (int c = c0; c <= c1; ++c) {
        if (best[c] >= 0 && best[c] <= dur) continue;
        best[c] = dur;
        row[c] = timeline_letter(s.name);
      }
    }
    out += "  " + lane + std::string(label - lane.size(), ' ') + " |";
    for (char ch : row) {
      if (color && ch != '.') {
        out += ansi_of(ch);
        out += ch;
        out += kReset;
      } else {
        out += ch;
      }
    }
    out += "|\n";
  }
  // time axis: 0 at the left edge, the window's length at the right
  std::string left = "0 ms", right = ms_str(static_cast<double>(t1 - t0));
  std::string axis = left + " " + right;  // too narrow for a scale
  if (left.size() + 1 + right.size() <= static_cast<size_t>(width)) {
    axis.assign(width, ' ');
    axis.replace(0, left.size(), left);
    axis.replace(width - right.size(), right.size(), right);
  }
  out += "  " + std::string(label, ' ') + "  " + axis + "\n";
  return out;
}

double trace_pipeline_bubble(const std::vector<TraceSpan>& spans, int64_t t0_us, int64_t t1_us) {
  std::vector<std::string> lanes;
  int64_t first = t1_us, last = t0_us, busy = 0;
  for (const TraceSpan& sp : spans) {
    const bool action = sp.name.size() >= 2 &&
                        std::string("FBIW").find(sp.name[0]) != std::string::npos &&
                        sp.name.find_first_not_of("0123456789", 1) == std::string::npos;
    if (!action || sp.begin_us < t0_us || sp.end_us > t1_us) continue;
    if (std::find(lanes.begin(), lanes.end(), sp.lane) == lanes.end()) lanes.push_back(sp.lane);
    first = std::min(first, sp.begin_us), last = std::max(last, sp.end_us);
    busy += sp.end_us - sp.begin_us;
  }
  if (lanes.empty() || last <= first) return -1;
  return 1.0 - static_cast<double>(busy) /
                   (static_cast<double>(lanes.size()) * static_cast<double>(last - first));
}

}  // namespace fanout::presentation
