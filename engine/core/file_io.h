#pragma once
// Files a user names, read and written safely. Inputs: only regular files are
// opened (a FIFO, device or directory given as a config or data file would block
// or mislead; it is refused by name). Results (traces, bench JSON/SVG, reports):
// written to a temporary sibling and renamed into place, every write checked (a
// full disk is an error, not a success), only over a regular file or a new path
// (never over a device node, a symlink or a directory), never over one of the
// command's inputs, and left whole or absent when a signal arrives meanwhile.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

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

// Note [Replacing an existing output]
// An output is never one of the command's inputs: `inputs` are compared with the
// output as files (device and inode), so a symlink or hard link to an input, or a
// path through a linked folder, is refused like the input's own name. Where a
// command's contract is to create a file (plot's SVG, report's HTML, a tokenizer.json,
// prepare's token files), an existing file is replaced only when it is empty or
// recognisably the same kind of output (`same_kind`: an SVG or page starting with
// kWrittenByFanout, a tokenizer.json, a token file with the llm.c header); any other
// file is the user's and is refused by name, so a mistyped path costs nothing.
struct OutputRules {
  std::vector<std::string> inputs;  // files the command reads (missing ones are skipped)
  std::string kind;                 // what may be replaced ("an SVG written by fanout")
  std::function<bool(const std::string& path)> same_kind;  // unset: any regular file
};

// The first line of the SVG and HTML files fanout writes, by which it knows them again.
inline constexpr std::string_view kWrittenByFanout = "<!-- written by fanout -->\n";

// Rules for a page or picture fanout writes, whose text starts with
// kWrittenByFanout then `head` ("<!DOCTYPE html>", "<svg"): an existing file is
// replaced only when it starts the same way (`kind` names such a file in
// messages), and never when it is one of `inputs`.
OutputRules written_by_fanout_rules(std::string kind, std::string head,
                                    std::vector<std::string> inputs = {});

// Throws unless `path` may receive a result: it does not exist yet (and its folder
// does) or it is a regular file, and `rules` allow it (Note [Replacing an existing
// output]). `what` names the flag in messages ("--trace").
void file_check_output(const std::string& path, std::string_view what,
                       const OutputRules& rules = {});

// Throws naming both when `path` is, as a file, one of `inputs` (part of file_check_output).
void file_check_not_input(const std::string& path, std::string_view what,
                          const std::vector<std::string>& inputs);

// Writes `content` to `path` atomically (temporary sibling, fsync, rename) after
// file_check_output; any failed write, fsync or rename throws naming the path and
// the reason, and leaves no temporary file behind (Note [Signals during a write]).
void file_write_atomic(const std::string& path, std::string_view content, std::string_view what,
                       const OutputRules& rules = {});

// Whether the regular file `path` starts with `prefix` (false when it cannot be read).
bool file_starts_with(const std::string& path, std::string_view prefix);

// Note [Signals during a write]
// SIGINT, SIGTERM and SIGHUP end a command that has no handler of its own
// (tokenizer train, prepare, plot). While a SignalsDeferred lives (file_write_atomic
// holds one; prepare holds one over both token files), such a signal is held back
// and acted on when the last one goes, once the files are in place: the output is
// whole and the process still dies of the signal. A second signal ends it at once,
// after removing the temporaries file_write_atomic has open, so nothing half-written
// stays either way. Signals with a handler (train's) or ignored are left alone.
class SignalsDeferred {
 public:
  SignalsDeferred();
  ~SignalsDeferred();  // re-raises a held signal when it is the last
  SignalsDeferred(const SignalsDeferred&) = delete;
  SignalsDeferred& operator=(const SignalsDeferred&) = delete;
};

// "a FIFO", "a directory", "a character device", ... for an st_mode.
const char* file_kind_name(unsigned mode);

}  // namespace fanout
