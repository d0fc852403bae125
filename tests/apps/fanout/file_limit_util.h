#pragma once
// Running `fanout` as if the disk were full: a 512-byte file size limit
// (RLIMIT_FSIZE, `ulimit -f 1`) makes every larger write of a result fail with
// EFBIG. stdout goes to /dev/null (no limit there), stderr to a small file.

#include <string>
#include <vector>

#include "tests/apps/fanout/cli_runner.h"

namespace fanout::test {

// ignore_xfsz: the shell ignores SIGXFSZ for fanout (tests of the write checks);
// without it fanout must ignore the signal itself, or the limit kills it.
CliResult run_fanout_file_limited(const std::vector<std::string>& args, bool ignore_xfsz);

// Names in `dir` that look like a writer's leftovers (".tmp" anywhere in them).
std::vector<std::string> temp_leftovers(const std::string& dir);

}  // namespace fanout::test
