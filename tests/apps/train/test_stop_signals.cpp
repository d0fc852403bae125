// StopSignals (Note [Stopping on a signal]): the first SIGINT or SIGTERM asks
// the loop to stop, a second stops the process at once, and under a relaying
// launcher a repeat sent by the launcher is the same request, before and after
// the loop. Each case runs in a forked child (signal handlers belong to the
// whole process) that reports through its exit status; here the child itself
// plays the launcher (relay_pid = its own pid: kill(getpid()) arrives as SI_USER
// from it), and raise() (SI_TKILL) plays a signal from anywhere else.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "apps/train/stop_signals.h"

using fanout::train::StopSignals;

namespace {

// Runs `body` in a child whose SIGINT and SIGTERM start as a plain process's
// (not the test runner's crash handlers): its exit code, or 128 + the signal
// that killed it.
int in_child(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    _exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Sends `sig` as the launcher would (SI_USER from relay_pid = this process).
void from_launcher(int sig) {
  ::kill(::getpid(), sig);
}

}  // namespace

TEST_CASE("a first signal asks to stop and a second one stops at once") {
  for (int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    CHECK(in_child([sig] {
            StopSignals s;
            ::raise(sig);
            return s.requested() == sig ? 0 : 1;
          }) == 0);
    CHECK(in_child([sig] {
            StopSignals s;
            ::raise(sig);
            ::raise(SIGINT);
            return 3;  // not reached: the second signal kills
          }) == 128 + SIGINT);
    // Once the loop is over, any signal stops at once, and the old handler is back.
    CHECK(in_child([sig] {
            StopSignals s;
            s.restore();
            ::raise(sig);
            return 3;
          }) == 128 + sig);
  }
}

TEST_CASE("under a launcher, its repeat of a signal already taken is that same request") {
  // A terminal's Ctrl-C (or a kill of the process group) and the launcher's relay of it.
  CHECK(in_child([] {
          StopSignals s(::getpid());
          ::raise(SIGINT);
          from_launcher(SIGINT);
          from_launcher(SIGINT);
          return s.requested() == SIGINT ? 0 : 1;
        }) == 0);
  // The launcher alone: its first signal is the request.
  CHECK(in_child([] {
          StopSignals s(::getpid());
          from_launcher(SIGTERM);
          return s.requested() == SIGTERM ? 0 : 1;
        }) == 0);
  // The relay may arrive after the loop, while rank 0 writes its checkpoint.
  CHECK(in_child([] {
          StopSignals s(::getpid());
          ::raise(SIGTERM);
          s.restore();
          from_launcher(SIGTERM);
          return 0;
        }) == 0);
  // A second signal from anywhere else still stops at once.
  CHECK(in_child([] {
          StopSignals s(::getpid());
          from_launcher(SIGINT);
          ::raise(SIGINT);
          return 3;
        }) == 128 + SIGINT);
  // Without a signal taken, the loop's end restores the old handlers even under a launcher.
  CHECK(in_child([] {
          StopSignals s(::getpid());
          s.restore();
          from_launcher(SIGINT);
          return 3;
        }) == 128 + SIGINT);
}
