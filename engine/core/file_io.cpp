#include "engine/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/core/check.h"

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

void write_all(int fd, const char* p, size_t left, const std::string& path) {
  while (left > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(left, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    FANOUT_CHECK(n > 0, path, ": cannot write: ", std::strerror(n < 0 ? errno : ENOSPC));
    p += n;
    left -= static_cast<size_t>(n);
  }
}
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

void file_check_output(const std::string& path, std::string_view what) {
  FANOUT_CHECK(!path.empty(), what, ": an empty string is not a file name");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    FANOUT_CHECK(S_ISREG(st.st_mode), what, " ", path, ": is ", file_kind_name(st.st_mode),
                 "; results are written only to regular files or new paths");
    return;
  }
  const int err = errno;
  FANOUT_CHECK(err == ENOENT, what, " ", path, ": ", std::strerror(err));
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  FANOUT_CHECK(parent.empty() || fs::is_directory(parent, ec), what, " ", path, ": the folder ",
               parent.string(), " does not exist");
}

void file_write_atomic(const std::string& path, std::string_view content, std::string_view what) {
  file_check_output(path, what);
  const std::string tmp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(g_temp_counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  FANOUT_CHECK(fd >= 0, what, " ", path, ": cannot create ", tmp, ": ", std::strerror(errno));
  try {
    write_all(fd, content.data(), content.size(), path);
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
