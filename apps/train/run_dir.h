#pragma once
// A run directory belongs to one `fanout train` at a time. RunDirLock holds an
// exclusive flock on OUT/.fanout.lock (with the owner's pid inside, for the
// message a second run prints); the kernel drops the lock when its owner dies, so
// a stale lock is never in the way. On taking a directory, a run removes the
// temporary directories that interrupted checkpoint writes left behind
// (NAME.tmp-<pid>-<n> whose writer is gone); nothing else is touched.

#include <string>
#include <vector>

namespace fanout::train {

inline constexpr const char* kRunLockFile = ".fanout.lock";

class RunDirLock {
 public:
  // Creates `dir` if needed and locks it; throws fanout::Error naming the pid
  // that holds it ("--out D is in use by another fanout train (pid N)").
  explicit RunDirLock(const std::string& dir);
  ~RunDirLock();  // unlocks and removes the lock file
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

// True when `dir` holds nothing but a lock file (a run that stopped before writing).
bool run_dir_only_ours(const std::string& dir);

// Removes `dir`/*.tmp-<pid>-<n> left by writers that are no longer running;
// returns the names removed.
std::vector<std::string> run_dir_remove_stale_temps(const std::string& dir);

// The files of a run directory that plot and report read, so that their output is
// never one of them: metrics.jsonl, trace*.json and bench*.json at the top, and
// every file inside its folders (the checkpoints). Only those that exist.
std::vector<std::string> run_dir_inputs(const std::string& dir);

}  // namespace fanout::train
