#include "tests/apps/fanout/file_limit_util.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/paths_util.h"

namespace fanout::test {

CliResult run_fanout_file_limited(const std::vector<std::string>& args, bool ignore_xfsz) {
  TempDir dir("fanout-limit");
  auto quote = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string cmd = ignore_xfsz ? "trap '' XFSZ; " : "";
  // dash counts -f in 512-byte blocks.
  cmd += "ulimit -f 1; exec " + quote(fanout_binary());
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " </dev/null >/dev/null 2>" + dir / "err";
  const int status = std::system(cmd.c_str());  // exec: a signal death shows as such
  CliResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(dir / "err");
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

std::vector<std::string> temp_leftovers(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) out.push_back(name);
  }
  return out;
}

}  // namespace fanout::test
