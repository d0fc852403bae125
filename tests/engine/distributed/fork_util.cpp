#include "tests/engine/distributed/fork_util.h"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "engine/core/check.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

namespace fanout::test::fork {

namespace rdzv = fanout::test::rdzv;

std::vector<Outcome> run_children(int world, double deadline_s,
                                  const std::function<std::string(int rank)>& fn) {
  std::vector<pid_t> pids(world, -1);
  std::vector<int> pipes(world, -1);
  std::vector<Outcome> out(world);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) break;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      int code = 0;
      std::string said;
      try {
        said = fn(r);
      } catch (const Mismatch& e) {
        code = kMismatch, said = std::string("mismatch: ") + e.what();
      } catch (const Error& e) {
        code = kFanoutError, said = std::string("fanout::Error: ") + e.what();
      } catch (const std::exception& e) {
        code = kOtherError, said = std::string("exception: ") + e.what();
      } catch (...) {
        code = kOtherError, said = "unknown exception";
      }
      if (code != 0) std::fprintf(stderr, "rank %d of %d: %s\n", r, world, said.c_str());
      said.resize(std::min<size_t>(said.size(), 4000));  // well within the pipe's buffer
      for (size_t at = 0; at < said.size();) {
        ssize_t w = ::write(fds[1], said.data() + at, said.size() - at);
        if (w <= 0) break;
        at += static_cast<size_t>(w);
      }
      ::_exit(code);
    }
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      break;
    }
    pids[r] = pid, pipes[r] = fds[0];
  }
  // Reap with a deadline; kill what is left (and every child if a fork failed).
  const auto t0 = std::chrono::steady_clock::now();
  bool all_started = pids.back() > 0;
  for (int left = world; left > 0;) {
    left = 0;
    for (int r = 0; r < world; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        out[r].ended = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                         : "signal " + std::to_string(WTERMSIG(status)) + " (" +
                                               ::strsignal(WTERMSIG(status)) + ")";
        pids[r] = -1;
      } else {
        ++left;
      }
    }
    if (left > 0 && (!all_started || rdzv::seconds_since(t0) > deadline_s)) {
      for (int r = 0; r < world; ++r)
        if (pids[r] > 0) {
          ::kill(pids[r], SIGKILL);
          int status = 0;
          ::waitpid(pids[r], &status, 0);
          out[r].ended = "killed at the deadline", pids[r] = -1;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < world; ++r) {
    if (pipes[r] < 0) continue;
    char buf[512];
    for (ssize_t n; (n = ::read(pipes[r], buf, sizeof buf)) > 0;) out[r].said.append(buf, n);
    ::close(pipes[r]);
  }
  REQUIRE_MESSAGE(all_started, "could not start ", world, " child processes");
  return out;
}

SharedCounter::SharedCounter()
    : p_(::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0)) {
  REQUIRE(p_ != MAP_FAILED);
  new (p_) std::atomic<int>(0);
}

SharedCounter::~SharedCounter() {
  ::munmap(p_, sizeof(std::atomic<int>));
}

}  // namespace fanout::test::fork
