#pragma once
// What a training run shows and records: a progress bar on a terminal (step,
// loss, tokens/s, lr, ETA, memory per device), redrawn in place and fitted to the
// terminal's width, or plain periodic lines when stdout is not a terminal, and
// metrics.jsonl (one JSON object per line).

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fanout::train {

struct StepReport {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0;
  std::string memory;  // "cpu:0 58M cpu:1 48M"
};

// The terminal line for step `r` of `total` (ETA in seconds), at most `width`
// columns: fields are dropped, least useful first (memory, lr, tokens/s, ETA, the
// bar), rather than wrapped; below the width of "step N/M | loss L" it is cut.
std::string progress_line_fit(const StepReport& r, int64_t total, double eta_s, int width);

class Progress {
 public:
  // quiet: print nothing but messages (for --json runs)
  Progress(int64_t total_steps, int64_t first_step, bool quiet);
  void step(const StepReport& r);
  // A line of its own (the bar, if any, is redrawn below it).
  void message(const std::string& line);
  void finish();

 private:
  void clear_bar();
  int64_t total_, first_;
  bool tty_, quiet_, bar_shown_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_line_;
};

// metrics.jsonl in the run directory. On resume, lines past the resumed step
// (written after the checkpoint by the interrupted run) are dropped first. Only a
// regular file (or a new path) is used, and every write is checked: a full disk
// throws fanout::Error naming the file and the reason instead of losing lines.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& line);

 private:
  std::string path_;
  int fd_ = -1;  // open for appending
};

}  // namespace fanout::train
