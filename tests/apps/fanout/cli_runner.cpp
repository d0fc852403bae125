#include "tests/apps/fanout/cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/paths_util.h"

namespace fanout::test {

namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

int CliResult::err_lines() const {
  int n = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

CliResult run_fanout(const std::vector<std::string>& args, const std::string& env) {
  std::string dir = make_temp_dir("fanout-cli");
  std::string cmd = env + (env.empty() ? "" : " ") + shell_quote(fanout_binary());
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  cmd += " </dev/null >" + dir + "/out 2>" + dir + "/err";
  int status = std::system(cmd.c_str());
  CliResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir + "/out");
  r.err = slurp(dir + "/err");
  std::filesystem::remove_all(dir);
  return r;
}

TempDir::TempDir(const std::string& prefix) : path(make_temp_dir(prefix)) {}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string make_temp_dir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  char* p = mkdtemp(tmpl.data());
  if (p == nullptr) throw std::runtime_error("mkdtemp failed");
  return p;
}

}  // namespace fanout::test
