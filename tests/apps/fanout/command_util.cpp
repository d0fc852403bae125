#include "tests/apps/fanout/command_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/launch_util.h"

namespace fanout::test {

Command::Command(const std::vector<std::string>& args, const std::vector<std::string>& env,
                 const std::string& log)
    : log_(log) {
  // Everything the child needs is built before fork: after it, only exec.
  std::vector<std::string> envs = ddp::child_environment(env), a = args;
  std::vector<char*> argv, envp;
  for (std::string& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (std::string& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || in < 0) throw std::runtime_error("cannot open " + log);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::dup2(in, 0), ::dup2(out, 1), ::dup2(out, 2);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  ::close(out), ::close(in);
  if (pid_ < 0) throw std::runtime_error("fork failed");
  ::setpgid(pid_, pid_);  // also here: the group exists before the destructor can signal it
}

Command::~Command() {
  ::kill(-pid_, SIGKILL);
  if (rc_ < 0) ::waitpid(pid_, nullptr, 0);
}

int Command::wait(double timeout_s) {
  if (rc_ >= 0) return rc_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      rc_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return rc_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string Command::output() const {
  return file_read(log_);
}

int shell(const std::string& command) {
  int status = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace fanout::test
