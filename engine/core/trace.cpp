#include "engine/core/trace.h"

#include <chrono>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/core/file_io.h"

namespace fanout {

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Trace::Trace() : epoch_ns_(steady_ns()) {}

Trace& Trace::global() {
  static Trace* t = new Trace();  // never destroyed: worker threads may record at exit
  return *t;
}

int64_t Trace::now_us() const {
  return (steady_ns() - epoch_ns_) / 1000;
}

void Trace::add(std::string lane, std::string name, int64_t begin_us, int64_t end_us) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  spans_.push_back({std::move(lane), std::move(name), begin_us, end_us});
}

std::vector<TraceSpan> Trace::spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_;
}

void Trace::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  spans_.clear();
}

std::string Trace::to_json() const {
  using nlohmann::json;
  std::vector<TraceSpan> spans = this->spans();
  std::map<std::string, int> lane_ids;
  for (const TraceSpan& s : spans) lane_ids.emplace(s.lane, 0);
  int next = 1;
  for (auto& [lane, id] : lane_ids) id = next++;
  json events = json::array();
  for (const auto& [lane, id] : lane_ids) {
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", 1},
                      {"tid", id},
                      {"args", {{"name", lane}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_sort_index"},
                      {"pid", 1},
                      {"tid", id},
                      {"args", {{"sort_index", id}}}});
  }
  for (const TraceSpan& s : spans) {
    events.push_back({{"ph", "X"},
                      {"name", s.name},
                      {"pid", 1},
                      {"tid", lane_ids[s.lane]},
                      {"ts", s.begin_us},
                      {"dur", std::max<int64_t>(0, s.end_us - s.begin_us)}});
  }
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

void Trace::write(const std::string& path, std::string_view what) const {
  // Atomic, every write checked, and never over a device node, FIFO, symlink or
  // directory (a rename over /dev/full would replace the node with a file).
  file_write_atomic(path, to_json(), what);
}

TraceScope::TraceScope(std::string lane, std::string name)
    : lane_(std::move(lane)), name_(std::move(name)) {
  if (Trace::global().enabled()) begin_us_ = Trace::global().now_us();
}

TraceScope::~TraceScope() {
  if (begin_us_ >= 0) {
    Trace& t = Trace::global();
    t.add(std::move(lane_), std::move(name_), begin_us_, t.now_us());
  }
}

}  // namespace fanout
