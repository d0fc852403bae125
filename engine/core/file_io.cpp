#include "engine/core/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "engine/core/check.h"
#include "engine/core/durable_file.h"

namespace fanout {

namespace {
namespace fs = std::filesystem;

std::atomic<uint64_t> g_temp_counter{0};

// Opens `path` for reading without blocking on FIFOs, and checks it is regular.
int open_regular(const std::string& path, struct stat& st) {
  FANOUT_CHECK(!path.empty(), "an empty string is not a file name");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    FANOUT_CHECK(err != ENOENT, path, ": no such file");
    detail::throw_error(detail::str_cat(path, ": cannot open: ", std::strerror(err)));
  }
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    detail::throw_error(detail::str_cat(path, ": cannot read its status: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    detail::throw_error(
        detail::str_cat(path, ": is ", file_kind_name(st.st_mode), ", not a regular file"));
  }
  return fd;
}

// --- signals during a write (Note [Signals during a write]) ---------------------

constexpr int kDeferredSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kNumDeferred = 3;
constexpr int kTempSlots = 16;
constexpr size_t kTempPathMax = 4096;

// The temporaries being written, for the handler to remove: a slot is claimed by a
// writer, filled, then marked ready; the handler reads only ready slots.
char g_temp_paths[kTempSlots][kTempPathMax];
std::atomic<bool> g_temp_claimed[kTempSlots];
std::atomic<bool> g_temp_ready[kTempSlots];
std::atomic<int> g_held_signal{0};

std::mutex g_defer_mu;  // guards the rest
int g_defer_depth = 0;
bool g_installed[kNumDeferred] = {};
struct sigaction g_previous[kNumDeferred];

extern "C" void on_write_signal(int sig) {
  int none = 0;
  if (g_held_signal.compare_exchange_strong(none, sig)) return;  // acted on after the write
  // A second signal: stop now, leaving nothing half-written.
  for (int i = 0; i < kTempSlots; ++i) {
    if (g_temp_ready[i].load()) ::unlink(g_temp_paths[i]);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered as the handler returns
}

// Registers a temporary for the handler while it exists on disk.
class TempRegistration {
 public:
  explicit TempRegistration(const std::string& path) {
    if (path.size() >= kTempPathMax) return;  // too long to keep: only the first signal is safe
    for (int i = 0; i < kTempSlots; ++i) {
      bool free = false;
      if (!g_temp_claimed[i].compare_exchange_strong(free, true)) continue;
      std::memcpy(g_temp_paths[i], path.c_str(), path.size() + 1);
      g_temp_ready[i].store(true);
      slot_ = i;
      return;
    }
  }
  ~TempRegistration() {
    if (slot_ < 0) return;
    g_temp_ready[slot_].store(false);
    g_temp_claimed[slot_].store(false);
  }
  TempRegistration(const TempRegistration&) = delete;
  TempRegistration& operator=(const TempRegistration&) = delete;

 private:
  int slot_ = -1;
};
}  // namespace

const char* file_kind_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
  }
  return "not a regular file";
}

RegularFile::RegularFile(const std::string& path) {
  struct stat st {};
  fd_ = open_regular(path, st);
  // Back to blocking reads: a regular file never blocks, but O_NONBLOCK is odd there.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

void file_check_regular(const std::string& path) {
  struct stat st {};
  ::close(open_regular(path, st));
}

uint64_t file_regular_size(const std::string& path) {
  struct stat st {};
  ::close(open_regular(path, st));
  return static_cast<uint64_t>(st.st_size);
}

std::string file_read_regular(const std::string& path, uint64_t max_bytes) {
  const RegularFile file(path);
  FANOUT_CHECK(file.size() <= max_bytes, path, ": ", file.size(), " bytes is more than the ",
               max_bytes, " this file may have");
  std::string out(static_cast<size_t>(file.size()), '\0');
  size_t have = 0;
  while (have < out.size()) {
    const ssize_t n = ::read(file.fd(), out.data() + have, out.size() - have);
    if (n < 0 && errno == EINTR) continue;
    FANOUT_CHECK(n >= 0, path, ": cannot read: ", std::strerror(errno));
    if (n == 0) break;  // shrank while read: take what is there
    have += static_cast<size_t>(n);
  }
  out.resize(have);
  return out;
}

void file_check_not_input(const std::string& path, std::string_view what,
                          const std::vector<std::string>& inputs) {
  struct stat out {};
  if (inputs.empty() || ::stat(path.c_str(), &out) != 0) return;  // a new path is no input
  for (const std::string& input : inputs) {
    struct stat in {};
    if (input.empty() || ::stat(input.c_str(), &in) != 0) continue;
    FANOUT_CHECK(in.st_dev != out.st_dev || in.st_ino != out.st_ino, what, " ", path,
                 " is the same file as the input ", input,
                 ": writing it would destroy what this command reads; choose another path for ",
                 what);
  }
}

OutputRules written_by_fanout_rules(std::string kind, std::string head,
                                    std::vector<std::string> inputs) {
  OutputRules rules;
  rules.inputs = std::move(inputs);
  rules.kind = std::move(kind);
  rules.same_kind = [prefix = std::string(kWrittenByFanout) + head](const std::string& path) {
    return file_starts_with(path, prefix);
  };
  return rules;
}

bool file_starts_with(const std::string& path, std::string_view prefix) {
  try {
    const RegularFile file(path);
    std::string head(prefix.size(), '\0');
    size_t have = 0;
    while (have < head.size()) {
      const ssize_t n =
          ::pread(file.fd(), head.data() + have, head.size() - have, static_cast<off_t>(have));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      have += static_cast<size_t>(n);
    }
    return head == prefix;
  } catch (const Error&) {
    return false;
  }
}

void file_check_output(const std::string& path, std::string_view what, const OutputRules& rules) {
  FANOUT_CHECK(!path.empty(), what, ": an empty string is not a file name");
  file_check_not_input(path, what, rules.inputs);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    FANOUT_CHECK(S_ISREG(st.st_mode), what, " ", path, ": is ", file_kind_name(st.st_mode),
                 "; results are written only to regular files or new paths");
    // Note [Replacing an existing output]: an empty file holds nothing to lose.
    FANOUT_CHECK(!rules.same_kind || st.st_size == 0 || rules.same_kind(path), what, " ", path,
                 ": exists and is not ", rules.kind,
                 ", so it is not replaced; remove it or choose another path");
    return;
  }
  const int err = errno;
  FANOUT_CHECK(err == ENOENT, what, " ", path, ": ", std::strerror(err));
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  FANOUT_CHECK(parent.empty() || fs::is_directory(parent, ec), what, " ", path, ": the folder ",
               parent.string(), " does not exist");
}

SignalsDeferred::SignalsDeferred() {
  const std::lock_guard<std::mutex> lock(g_defer_mu);
  if (g_defer_depth++ > 0) return;
  g_held_signal.store(0);
  for (int i = 0; i < kNumDeferred; ++i) {
    g_installed[i] = false;
    struct sigaction now {};
    // Only where the signal would end the process: a handler or SIG_IGN is the caller's.
    if (::sigaction(kDeferredSignals[i], nullptr, &now) != 0 || (now.sa_flags & SA_SIGINFO) ||
        now.sa_handler != SIG_DFL) {
      continue;
    }
    struct sigaction hold {};
    hold.sa_handler = on_write_signal;
    sigemptyset(&hold.sa_mask);
    hold.sa_flags = SA_RESTART;
    g_installed[i] = ::sigaction(kDeferredSignals[i], &hold, &g_previous[i]) == 0;
  }
}

SignalsDeferred::~SignalsDeferred() {
  int held = 0;
  {
    const std::lock_guard<std::mutex> lock(g_defer_mu);
    if (--g_defer_depth > 0) return;
    for (int i = 0; i < kNumDeferred; ++i) {
      if (g_installed[i]) ::sigaction(kDeferredSignals[i], &g_previous[i], nullptr);
      g_installed[i] = false;
    }
    held = g_held_signal.exchange(0);
  }
  if (held != 0) ::raise(held);  // its default action, now that the files are in place
}

void file_write_atomic(const std::string& path, std::string_view content, std::string_view what,
                       const OutputRules& rules) {
  file_check_output(path, what, rules);
  const SignalsDeferred deferred;
  const std::string tmp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(g_temp_counter++);
  const TempRegistration registered(tmp);  // before it exists: no moment unregistered
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  FANOUT_CHECK(fd >= 0, what, " ", path, ": cannot create ", tmp, ": ", std::strerror(errno));
  try {
    fd_write_all(fd, content, path);
    FANOUT_CHECK(::fsync(fd) == 0, path, ": cannot write: ", std::strerror(errno));
    const int rc = ::close(fd);
    fd = -1;
    FANOUT_CHECK(rc == 0, path, ": cannot write: ", std::strerror(errno));
    FANOUT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot rename ", tmp,
                 " into place: ", std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace fanout
