#include "apps/train/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "apps/data/terminal_text.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"
#include "engine/core/json_parse.h"

namespace fanout::train {

namespace {
std::string clock_str(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}
std::string fmt(const char* f, auto... args) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

// "step 3/300 | loss 2.1000 | ..." of the fields in `keep`, in display order.
enum Field { kStep, kLoss, kTokens, kLr, kEta, kMemory, kFields };

std::string stats_join(const std::string (&fields)[kFields], const bool (&keep)[kFields]) {
  std::string out;
  for (int i = 0; i < kFields; ++i) {
    if (!keep[i] || fields[i].empty()) continue;
    out += (out.empty() ? "" : " | ") + fields[i];
  }
  return out;
}
}  // namespace

std::string progress_line_fit(const StepReport& r, int64_t total, double eta_s, int width) {
  if (width <= 0) return "";
  const std::string fields[kFields] = {
      fmt("step %lld/%lld", static_cast<long long>(r.step), static_cast<long long>(total)),
      fmt("loss %.4f", r.loss),
      fmt("%.0f tok/s", r.tokens_per_s),
      fmt("lr %.2e", r.lr),
      "ETA " + clock_str(eta_s),
      r.memory};
  bool keep[kFields] = {true, true, true, true, true, true};
  // Dropped in this order until the line fits.
  const Field drop[] = {kMemory, kLr, kTokens, kEta};
  const size_t w = static_cast<size_t>(width);
  std::string stats = stats_join(fields, keep);
  for (Field f : drop) {
    if (stats.size() <= w) break;
    keep[f] = false;
    stats = stats_join(fields, keep);
  }
  if (stats.size() > w) return stats.substr(0, w);
  // The bar takes what is left, up to 24 cells; under 8 it says too little to show.
  const size_t room = w - stats.size();
  if (room < 8 + 3) return stats;
  const int64_t cells = static_cast<int64_t>(std::min<size_t>(24, room - 3));
  const int64_t filled =
      cells * std::clamp<int64_t>(r.step, 0, total) / std::max<int64_t>(total, 1);
  std::string line(1, '[');
  line.append(static_cast<size_t>(filled), '#').append(static_cast<size_t>(cells - filled), '.');
  return line.append("] ").append(stats);
}

Progress::Progress(int64_t total_steps, int64_t first_step, bool quiet)
    : total_(total_steps),
      first_(first_step),
      tty_(isatty(fileno(stdout)) != 0),
      quiet_(quiet),
      start_(std::chrono::steady_clock::now()),
      last_line_(start_) {}

void Progress::clear_bar() {
  if (bar_shown_) std::printf("\r\033[K");
  bar_shown_ = false;
}

void Progress::step(const StepReport& r) {
  if (quiet_) return;
  auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - start_).count();
  int64_t done = r.step - first_ + 1, left = total_ - r.step;
  double eta = done > 0 ? elapsed / done * left : 0;
  if (tty_) {
    // One column spare: a line filling the last column would wrap on some terminals.
    // The width is asked each time, so a resized window is followed.
    const std::string line = progress_line_fit(
        r, total_, eta, static_cast<int>(data::terminal_width(fileno(stdout))) - 1);
    std::printf("\r\033[K%s", line.c_str());
    std::fflush(stdout);
    bar_shown_ = true;
    return;
  }
  char stats[256];
  std::snprintf(stats, sizeof stats, "step %lld/%lld | loss %.4f | %.0f tok/s | lr %.2e | ETA %s",
                static_cast<long long>(r.step), static_cast<long long>(total_), r.loss,
                r.tokens_per_s, r.lr, clock_str(eta).c_str());
  // Plain lines: the first steps, then about every 10 seconds, and the last.
  bool due = r.step - first_ < 3 || r.step == total_ ||
             std::chrono::duration<double>(now - last_line_).count() >= 10.0;
  if (!due) return;
  last_line_ = now;
  std::printf("%s | %s\n", stats, r.memory.c_str());
  std::fflush(stdout);
}

void Progress::message(const std::string& line) {
  clear_bar();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void Progress::finish() {
  if (bar_shown_) std::printf("\n");
  bar_shown_ = false;
  std::fflush(stdout);
}

MetricsLog::MetricsLog(const std::string& path, int64_t resume_step) : path_(path) {
  constexpr std::string_view kWhat = "the metrics log";
  file_check_output(path, kWhat);
  std::string kept;
  if (::access(path.c_str(), F_OK) == 0) {
    std::istringstream in(file_read_regular(path, uint64_t{4} << 30));
    for (std::string line; std::getline(in, line);) {
      auto j = json_parse_or_discarded(line);
      if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= resume_step) {
        kept += line + "\n";
      }
    }
  }
  file_write_atomic(path, kept, kWhat);
  // O_NOFOLLOW: the file just written is regular; refuse it if swapped for a link since.
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  FANOUT_CHECK(fd_ >= 0, "cannot write ", path, ": ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    // A write of 0 bytes to a regular file means no room: say so rather than spin.
    FANOUT_CHECK(n > 0, "cannot write ", path_, ": ", std::strerror(n < 0 ? errno : ENOSPC));
    done += static_cast<size_t>(n);
  }
}

}  // namespace fanout::train
