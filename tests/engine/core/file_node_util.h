#pragma once
// Test helpers for result writers: the kinds of path a result must never replace
// (a FIFO, a character device, a symlink, a directory), made inside a temp dir,
// an identity to check that each is untouched afterwards, and a file size limit
// (RLIMIT_FSIZE) that makes writes fail the way a full disk does.

#include <sys/resource.h>
#include <string>
#include <vector>

namespace fanout::test {

struct FileNode {
  std::string kind;  // as file_kind_name says it: "a FIFO", "a character device", ...
  std::string path;
};

// A FIFO, a character device (1,3, as /dev/null; skipped with a MESSAGE where
// mknod is not allowed), a symlink to a regular file and a directory, in `dir`,
// their names prefixed with `prefix`.
std::vector<FileNode> make_file_nodes(const std::string& dir, const std::string& prefix = "");

// Kind, inode, device numbers and link target: equal before and after means the
// node was neither replaced nor turned into a regular file.
std::string file_node_identity(const std::string& path);

// Lowers this process's file size limit to `bytes` with SIGXFSZ ignored (writes
// past it fail with EFBIG, as on a full disk); both restored on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes);
  ~FileSizeLimit();
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  struct rlimit old_ {};
  void (*old_handler_)(int) = nullptr;
};

}  // namespace fanout::test
