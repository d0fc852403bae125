#pragma once
// Files a user names, read and written safely. Inputs: only regular files are
// opened (a FIFO, device or directory given as a config or data file would block
// or mislead; it is refused by name). Results (traces, bench JSON/SVG, reports):
// written to a temporary sibling and renamed into place, every write checked (a
// full disk is an error, not a success), and only over a regular file or a new
// path (never over a device node, a symlink or a directory).

#include <cstdint>
#include <string>
#include <string_view>

namespace fanout {

// Throws fanout::Error "<path>: no such file" / "<path>: is a FIFO, not a regular
// file" / "<path>: cannot open: <reason>" unless `path` (symlinks followed) is a
// regular file this process can open for reading. Never blocks.
void file_check_regular(const std::string& path);

// A read-only descriptor of a regular file, closed with the object: opened without
// blocking (a FIFO is refused by name, as above) and checked with fstat, so what is
// read is the regular file that was checked. Reads with pread need no seeking.
class RegularFile {
 public:
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The size of the regular file `path` (checked as above).
uint64_t file_regular_size(const std::string& path);

// The whole regular file as bytes, refusing files over `max_bytes` by name.
std::string file_read_regular(const std::string& path, uint64_t max_bytes = uint64_t{1} << 30);

// Throws unless `path` may receive a result: it does not exist yet (and its folder
// does) or it is a regular file. `what` names the flag in messages ("--trace").
void file_check_output(const std::string& path, std::string_view what);

// Writes `content` to `path` atomically (temporary sibling, fsync, rename) after
// file_check_output; any failed write, fsync or rename throws naming the path and
// the reason, and leaves no temporary file behind.
void file_write_atomic(const std::string& path, std::string_view content, std::string_view what);

// "a FIFO", "a directory", "a character device", ... for an st_mode.
const char* file_kind_name(unsigned mode);

}  // namespace fanout
