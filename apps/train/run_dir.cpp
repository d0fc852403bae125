#include "apps/train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "apps/train/checkpoint.h"
#include "engine/core/check.h"
#include "engine/core/durable_file.h"

namespace fanout::train {

namespace {
namespace fs = std::filesystem;

// The pid written in a lock file ("" if unreadable).
std::string lock_owner(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Whether `name` ends in ".tmp-<pid>-<n>"; sets pid.
bool temp_name(const std::string& name, long& pid) {
  const size_t at = name.rfind(".tmp-");
  if (at == std::string::npos || at == 0) return false;
  const char* first = name.data() + at + 5;
  const char* last = name.data() + name.size();
  auto [dash, ec] = std::from_chars(first, last, pid);
  if (ec != std::errc() || dash == first || dash == last || *dash != '-') return false;
  long n = 0;
  auto [end, ec2] = std::from_chars(dash + 1, last, n);
  return ec2 == std::errc() && end == last && end != dash + 1;
}
// A checkpoint's temporary directory holds nothing but checkpoint files (some
// perhaps half-written as NAME.tmp): anything else is not provably ours.
bool only_checkpoint_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!checkpoint_file_known(e.path().filename().string()) || !e.is_regular_file(ec)) {
      return false;
    }
  }
  return !ec;
}
}  // namespace

RunDirLock::RunDirLock(const std::string& dir) : path_((fs::path(dir) / kRunLockFile).string()) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  FANOUT_CHECK(!ec, "--out ", dir, ": cannot create it: ", ec.message());
  // Lock, then make sure the file locked is still the one at the path: an owner
  // that was exiting may have unlinked it between our open and our flock.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    FANOUT_CHECK(fd >= 0, "--out ", dir, ": cannot create ", kRunLockFile, ": ",
                 std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string owner = lock_owner(fd);
      ::close(fd);
      FANOUT_CHECK(err != EWOULDBLOCK, "--out ", dir, " is in use by another fanout train",
                   owner.empty() ? std::string() : " (pid " + owner + ")",
                   ": wait for it to finish or choose another --out");
      detail::throw_error(
          detail::str_cat("--out ", dir, ": cannot lock ", kRunLockFile, ": ", std::strerror(err)));
    }
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) == 0 && ::stat(path_.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
        const int err = errno;
        ::close(fd);
        detail::throw_error(detail::str_cat("--out ", dir, ": cannot write ", kRunLockFile, ": ",
                                            std::strerror(err)));
      }
      fd_ = fd;
      return;
    }
    ::close(fd);  // replaced under us: try the new file
  }
  detail::throw_error(detail::str_cat("--out ", dir, ": cannot take ", kRunLockFile));
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked: a waiting run then retries on a new file
  ::close(fd_);
}

bool run_dir_only_ours(const std::string& dir) {
  std::error_code ec;
  bool any = false;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename() != kRunLockFile) return false;
    any = true;
  }
  return any && !ec;
}

std::vector<std::string> run_dir_remove_stale_temps(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    long pid = -1;
    const std::string name = e.path().filename().string();
    if (temp_name(name, pid) && pid != static_cast<long>(::getpid()) && !process_alive(pid) &&
        only_checkpoint_files(e.path())) {
      stale.push_back(e.path());
    }
  }
  for (const fs::path& p : stale) {
    std::error_code rm;
    fs::remove_all(p, rm);
    if (!rm) removed.push_back(p.filename().string());
  }
  return removed;
}

std::vector<std::string> run_dir_inputs(const std::string& dir) {
  std::vector<std::string> inputs;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code kind;
    if (e.is_directory(kind)) {
      for (const fs::directory_entry& f : fs::directory_iterator(e.path(), kind)) {
        if (f.is_regular_file(kind)) inputs.push_back(f.path().string());
      }
    } else if (name == "metrics.jsonl" ||
               ((name.starts_with("trace") || name.starts_with("bench")) &&
                name.ends_with(".json"))) {
      inputs.push_back(e.path().string());
    }
  }
  return inputs;
}

}  // namespace fanout::train
