#include "engine/core/durable_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/core/check.h"

namespace fanout {

namespace {
// A descriptor of `path` to fsync, or -1 with errno set.
int open_for_sync(const std::string& path, bool directory) {
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
}
}  // namespace

void fd_write_all(int fd, std::string_view bytes, const std::string& path) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(left, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    FANOUT_CHECK(n > 0, path, ": cannot write: ", std::strerror(n < 0 ? errno : ENOSPC));
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void path_sync(const std::string& path, bool directory) {
  const int fd = open_for_sync(path, directory);
  FANOUT_CHECK(fd >= 0, path, ": cannot open to fsync: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  FANOUT_CHECK(rc == 0, path, ": cannot fsync: ", std::strerror(err));
}

void dir_sync_best_effort(const std::string& dir) {
  const int fd = open_for_sync(dir, true);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

bool process_alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace fanout
