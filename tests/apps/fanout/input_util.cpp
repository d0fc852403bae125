#include "tests/apps/fanout/input_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "tests/apps/fanout/cli_runner.h"
#include "tests/paths_util.h"

extern char** environ;

namespace fanout::test {

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

Fifo::Fifo(std::string path) : path_(std::move(path)) {
  if (::mkfifo(path_.c_str(), 0644) != 0) throw std::runtime_error("mkfifo " + path_ + " failed");
  writer_ = std::thread([p = path_] {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);  // waits for a reader
    if (fd >= 0) ::close(fd);
  });
}

Fifo::~Fifo() {
  // The writer waits for a reader until one opens the FIFO; this one lets it finish.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  writer_.join();
  if (fd >= 0) ::close(fd);
  ::unlink(path_.c_str());
}

int LimitedRun::err_lines() const {
  int n = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

LimitedRun run_fanout_limited(const std::vector<std::string>& args, double timeout_s) {
  TempDir dir("fanout-limited");
  const std::string out = dir / "out", err = dir / "err";
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const std::string binary = fanout_binary();
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, binary.c_str(), &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) throw std::runtime_error("cannot start " + binary);

  LimitedRun r;
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  struct rusage usage {};
  for (;;) {
    const pid_t done = ::wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > timeout_s) {
      ::kill(pid, SIGKILL);
      ::wait4(pid, &status, 0, &usage);
      r.timed_out = true;
      break;
    }
    ::usleep(10'000);
  }
  r.rc = r.timed_out           ? -1
         : WIFEXITED(status)   ? WEXITSTATUS(status)
         : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                               : -1;
  r.max_rss_kb = usage.ru_maxrss;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace fanout::test
