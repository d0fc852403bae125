#pragma once
// Trace recorder: timed spans on named lanes ("cpu:0 compute", "cpu:0 comm",
// "host"), written as Chrome / Perfetto trace JSON (open in ui.perfetto.dev).
// One process-wide recorder; recording costs nothing while it is disabled.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace fanout {

struct TraceSpan {
  std::string lane, name;
  int64_t begin_us = 0, end_us = 0;
};

class Trace {
 public:
  static Trace& global();

  void set_enabled(bool on) { enabled_.store(on); }
  bool enabled() const { return enabled_.load(); }
  int64_t now_us() const;  // microseconds since the recorder was created

  void add(std::string lane, std::string name, int64_t begin_us, int64_t end_us);
  std::vector<TraceSpan> spans() const;
  void clear();

  std::string to_json() const;  // {"traceEvents": [...]}: one thread (tid) per lane
  // Through file_write_atomic: only to a regular file or a new path; throws
  // fanout::Error naming `what` (the flag) and the path if it cannot write.
  void write(const std::string& path, std::string_view what = "--trace") const;

 private:
  Trace();
  std::atomic<bool> enabled_{false};
  int64_t epoch_ns_;
  mutable std::mutex mu_;
  std::vector<TraceSpan> spans_;
};

// A host-side span on `lane`, from construction to destruction.
class TraceScope {
 public:
  TraceScope(std::string lane, std::string name);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  std::string lane_, name_;
  int64_t begin_us_ = -1;
};

}  // namespace fanout
