#pragma once
// Helpers for the tests of bad input files: a FIFO that can never hang the test
// (a writer thread releases any reader that blocks on it), and running the real
// `fanout` binary with a time limit and its peak resident memory.

#include <string>
#include <thread>
#include <vector>

namespace fanout::test {

// mkfifo(path) for the object's lifetime. A reader that opens it blocking (the bug
// these tests catch) is released by a writer thread that opens and closes it, so it
// reads end-of-file instead of waiting forever; the destructor ends the thread.
class Fifo {
 public:
  explicit Fifo(std::string path);
  ~Fifo();
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::thread writer_;
};

struct LimitedRun {
  int rc = -1;  // exit code, 128 + signal, or -1 when killed at the time limit
  bool timed_out = false;
  long max_rss_kb = 0;  // peak resident memory of the process (getrusage's ru_maxrss)
  std::string out, err;
  int err_lines() const;
};

// `fanout ARGS...` with stdin from /dev/null, killed after `timeout_s` seconds.
LimitedRun run_fanout_limited(const std::vector<std::string>& args, double timeout_s = 10);

}  // namespace fanout::test
