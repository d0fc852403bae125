#pragma once
// Runs the real `fanout` binary for CLI tests: exit code, stdout and stderr.

#include <string>
#include <vector>

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

}  // namespace fanout::test
