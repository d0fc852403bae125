// Ctrl-C and SIGTERM reaching a `fanout launch` the ways they do in practice,
// through the real binary on loopback with CPU ranks: a terminal's Ctrl-C (to
// the whole foreground process group, here a pseudo-terminal's), a kill of the
// launch's whole process group, and a SIGTERM to the launcher alone. Each must
// act as one signal: every rank finishes its step, rank 0 checkpoints it, says
// so and draws the curves, and the launch exits as train does (130, 143).
// The launcher relays signals to its ranks (Note [Ctrl-C under launch]).

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "apps/train/checkpoint.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"
#include "tests/paths_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// `fanout launch ...` as the leader of a session of its own (as `setsid` starts
// it): its process group is its pid. With `terminal`, a pseudo-terminal is the
// session's controlling terminal and every process's stdin, as in a shell, and
// typing ^C on it signals the foreground group. stdout and stderr go to files.
class SessionLaunch {
 public:
  SessionLaunch(const std::vector<std::string>& args, const std::vector<std::string>& env,
                const std::string& log_dir, bool terminal)
      : out_(log_dir + "/launch.out"), err_(log_dir + "/launch.err") {
    std::vector<std::string> envs = child_environment(env);
    std::string binary = fanout_binary();
    std::vector<std::string> argv_s = args;
    std::vector<char*> argv{binary.data()}, envp;
    for (std::string& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (std::string& s : envs) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string pts;
    if (terminal) {
      master_ = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
      if (master_ < 0 || ::grantpt(master_) != 0 || ::unlockpt(master_) != 0)
        throw std::runtime_error("no pseudo-terminal");
      pts = ::ptsname(master_);
    }
    int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0 || err < 0) throw std::runtime_error("cannot open the logs in " + log_dir);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setsid();
      // A session leader's first terminal becomes its controlling terminal.
      int in = ::open(terminal ? pts.c_str() : "/dev/null", O_RDWR | O_CLOEXEC);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGINT, SIG_DFL), ::signal(SIGTERM, SIG_DFL);
      ::dup2(in, 0), ::dup2(out, 1), ::dup2(err, 2);
      ::execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    ::close(out), ::close(err);
    if (pid_ < 0) throw std::runtime_error("fork failed");
  }
  ~SessionLaunch() {
    ::kill(-pid_, SIGKILL);
    if (rc_ < 0) ::waitpid(pid_, nullptr, 0);
    if (master_ >= 0) ::close(master_);
  }
  SessionLaunch(const SessionLaunch&) = delete;
  SessionLaunch& operator=(const SessionLaunch&) = delete;

  pid_t pid() const { return pid_; }
  // ^C typed on the terminal.
  bool type_ctrl_c() const { return master_ >= 0 && ::write(master_, "\x03", 1) == 1; }
  // The exit code (128 + signal when killed), or -1 once `timeout_s` passed.
  int wait(double timeout_s) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (rc_ < 0 && Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_)
        rc_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return rc_;
  }
  // Waits until `path` holds a whole line (the run is training); false if the launch ended first.
  bool wait_for_line(const std::string& path, double timeout_s) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < deadline) {
      if (file_read(path).find('\n') != std::string::npos) return true;
      if (wait(0.01) >= 0) return false;
    }
    return false;
  }
  std::string out() const { return file_read(out_); }
  std::string err() const { return file_read(err_); }

 private:
  pid_t pid_ = -1;
  int master_ = -1, rc_ = -1;
  std::string out_, err_;
};

// An env entry no other process has: every process of one run inherits it.
std::string marker_env() {
  return "FANOUT_TEST_SIGNAL_MARKER=" + std::to_string(::getpid()) + "-" +
         std::to_string(Clock::now().time_since_epoch().count());
}

enum class Sent { terminal_ctrl_c, group_kill, launcher_kill };

}  // namespace

TEST_CASE("launch stops every rank once on a terminal's Ctrl-C, a group kill or a SIGTERM") {
  struct Case {
    Sent how;
    int sig;
    const char* said;  // what rank 0 prints
  };
  for (const Case& c : {Case{Sent::terminal_ctrl_c, SIGINT, "interrupted"},
                        Case{Sent::group_kill, SIGINT, "interrupted"},
                        Case{Sent::group_kill, SIGTERM, "terminated (SIGTERM)"},
                        Case{Sent::launcher_kill, SIGTERM, "terminated (SIGTERM)"}}) {
    CAPTURE(static_cast<int>(c.how));
    CAPTURE(c.sig);
    TinyRun run;
    const std::string out = run.dir / "out", marker = marker_env();
    SessionLaunch launch(
        concat({"launch", "--nproc-per-node", "2", "--"},
               concat(run.train_args(out, 100000),
                      {"--strategy", "ddp", "--devices", "cpu", "--timeout", "30"})),
        {marker}, run.dir.path, c.how == Sent::terminal_ctrl_c);
    REQUIRE(launch.wait_for_line(out + "/metrics.jsonl", 120));
    if (c.how == Sent::terminal_ctrl_c) {
      REQUIRE(launch.type_ctrl_c());
    } else {
      REQUIRE(::kill(c.how == Sent::group_kill ? -launch.pid() : launch.pid(), c.sig) == 0);
    }
    const int rc = launch.wait(60);
    INFO("stdout: " << launch.out() << "\nstderr: " << launch.err());
    CHECK(rc == 128 + c.sig);
    CHECK(launch.err().empty());
    check_no_process_left(marker);

    // The checkpoint of the step the signal stopped, named in one line, and the curves.
    std::vector<std::string> steps, partial;
    for (const auto& e : fs::directory_iterator(out)) {
      std::string name = e.path().filename().string();
      if (has(name, ".tmp-"))
        partial.push_back(name);  // a write cut short
      else if (name.rfind("step-", 0) == 0)
        steps.push_back(name);
    }
    CHECK(partial.empty());
    CHECK(steps.size() == 1);
    if (steps.size() != 1) continue;
    const int64_t step = train::checkpoint_read(out + "/" + steps[0]).state.step;
    CHECK(metrics_last_step(out + "/metrics.jsonl") == step);
    CHECK(
        lines_with(launch.out(), std::string(c.said) + " at step " + std::to_string(step)).size() ==
        1);
    CHECK(fs::exists(out + "/curves.svg"));
    CHECK_FALSE(fs::exists(out + "/final"));
  }
}
