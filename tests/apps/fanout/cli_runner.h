#pragma once
// Helpers every test folder shares: running the real `fanout` binary (exit code,
// stdout, stderr), temporary directories, and the message of a fanout::Error.

#include <string>
#include <vector>

#include "engine/core/check.h"

namespace fanout::test {

struct CliResult {
  int rc = -1;
  std::string out, err;
  int err_lines() const;  // non-empty lines on stderr
};

// args are passed through /bin/sh quoting; env is "NAME=value ..." prepended.
CliResult run_fanout(const std::vector<std::string>& args, const std::string& env = "");

// A fresh empty directory under the system temp folder.
std::string make_temp_dir(const std::string& prefix);

// A temp directory removed with everything in it when the object goes.
struct TempDir {
  explicit TempDir(const std::string& prefix = "fanout-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// ThreadSanitizer keeps shadow memory for every byte a process reads (a 256 MB
// scan makes about 1 GB resident): bounds on resident memory hold only without it.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kResidentMemoryChecked = false;
#else
inline constexpr bool kResidentMemoryChecked = true;
#endif

// Whether this build runs under AddressSanitizer (GCC's macro), which slows a
// training run about tenfold: wall-clock bounds against hangs widen for it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// Whether `part` occurs in `text`.
// The whole file at `path` ("" when it cannot be read).
std::string read_text(const std::string& path);

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of the fanout::Error `f` throws ("" if it throws none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fanout::test
