#include "tests/engine/core/file_node_util.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <stdexcept>

namespace fanout::test {

std::vector<FileNode> make_file_nodes(const std::string& dir, const std::string& prefix) {
  // The FIFO last: code that wrongly opens it blocks, after the other cases reported.
  std::vector<FileNode> nodes;
  const std::string base = dir + "/" + prefix;
  if (::mkdir((base + "dir").c_str(), 0755) != 0) throw std::runtime_error("mkdir failed");
  nodes.push_back({"a directory", base + "dir"});
  std::ofstream(base + "target") << "keep me\n";
  if (::symlink((prefix + "target").c_str(), (base + "link").c_str()) != 0)
    throw std::runtime_error("symlink failed");
  nodes.push_back({"a symbolic link", base + "link"});
  if (::mknod((base + "chardev").c_str(), S_IFCHR | 0644, makedev(1, 3)) == 0) {
    nodes.push_back({"a character device", base + "chardev"});
  } else {
    MESSAGE("mknod is not allowed here (not root?): the character device case is skipped");
  }
  if (::mkfifo((base + "fifo").c_str(), 0644) != 0) throw std::runtime_error("mkfifo failed");
  nodes.push_back({"a FIFO", base + "fifo"});
  return nodes;
}

std::string file_node_identity(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "missing";
  std::string id = std::to_string(st.st_mode & S_IFMT) + " ino " + std::to_string(st.st_ino) +
                   " rdev " + std::to_string(st.st_rdev);
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    id += " -> " + std::string(target, n > 0 ? static_cast<size_t>(n) : 0);
  }
  return id;
}

FileSizeLimit::FileSizeLimit(rlim_t bytes) {
  old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
  if (::getrlimit(RLIMIT_FSIZE, &old_) != 0) throw std::runtime_error("getrlimit failed");
  struct rlimit lowered = old_;
  lowered.rlim_cur = bytes;
  if (::setrlimit(RLIMIT_FSIZE, &lowered) != 0) throw std::runtime_error("setrlimit failed");
}

FileSizeLimit::~FileSizeLimit() {
  ::setrlimit(RLIMIT_FSIZE, &old_);
  std::signal(SIGXFSZ, old_handler_);
}

}  // namespace fanout::test
