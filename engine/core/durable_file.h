#pragma once
// The POSIX pieces of a write that survives a crash or a power cut, shared by
// file_write_atomic (engine/core/file_io.h) and the checkpoint writer: every byte
// to a descriptor, fsync of a file or directory by path, and whether the process
// that named a temporary after its pid (NAME.tmp-<pid>-<n>) is still running.

#include <string>
#include <string_view>

namespace fanout {

// Writes all of `bytes` to `fd`, retrying short and interrupted writes. Throws
// fanout::Error "<path>: cannot write: <reason>" (a write that takes nothing is
// reported as no space left).
void fd_write_all(int fd, std::string_view bytes, const std::string& path);

// fsyncs the existing file or directory `path`. Throws fanout::Error
// "<path>: cannot open to fsync: <reason>" or "<path>: cannot fsync: <reason>".
void path_sync(const std::string& path, bool directory);

// path_sync of a directory where it can, for a rename that is worth keeping but
// not worth failing over: a failure is ignored.
void dir_sync_best_effort(const std::string& dir);

// Whether `pid` is a running process (one this process may not signal counts as
// running); false for pid <= 0.
bool process_alive(long pid);

}  // namespace fanout
