// Note [Signals during a write] in file_io.h: SIGTERM or SIGINT while
// file_write_atomic writes a large result leaves the result whole (or, before the
// write began, absent) and no temporary beside it, and the process still dies of
// the signal; a second signal ends it at once, still leaving no temporary. Before
// this, the default action killed the writer mid-write and its NAME.tmp-PID-N stayed.
// Each case forks a child that writes 48 MiB and is signalled once it has begun.

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "engine/core/file_io.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/file_limit_util.h"

using namespace fanout;

namespace {
constexpr size_t kBytes = size_t{48} << 20;

struct Outcome {
  int status = 0;
  bool exists = false;
  off_t size = 0;
};

// A child writes `content` to `path` and is sent `sig` `delay_us` after it starts
// the write (and again `second_us` later when that is >= 0).
Outcome write_and_signal(const std::string& path, const std::string& content, int sig, int delay_us,
                         int second_us) {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::close(ready[0]);
    if (::write(ready[1], "g", 1) != 1) _exit(3);
    try {
      file_write_atomic(path, content, "--out");
    } catch (...) {
      _exit(2);
    }
    _exit(0);
  }
  ::close(ready[1]);
  char go = 0;
  REQUIRE(::read(ready[0], &go, 1) == 1);
  ::close(ready[0]);
  ::usleep(static_cast<useconds_t>(delay_us));
  ::kill(pid, sig);
  if (second_us >= 0) {
    ::usleep(static_cast<useconds_t>(second_us));
    ::kill(pid, sig);
  }
  Outcome o;
  REQUIRE(::waitpid(pid, &o.status, 0) == pid);
  struct stat st {};
  o.exists = ::stat(path.c_str(), &st) == 0;
  o.size = st.st_size;
  return o;
}
}  // namespace

TEST_CASE("a signal during file_write_atomic leaves the whole file and no temporary, then acts") {
  const std::string content(kBytes, 'x');
  int during = 0;  // signals that arrived while the file was being written
  for (const int sig : {SIGTERM, SIGINT}) {
    for (const int delay_us : {0, 0, 200, 1000, 5000, 20000}) {
      CAPTURE(sig);
      CAPTURE(delay_us);
      test::TempDir dir("fanout-write-signal");
      const Outcome o = write_and_signal(dir / "out.bin", content, sig, delay_us, -1);
      CHECK(test::temp_leftovers(dir.path).empty());
      // Killed by the signal (held until the file was in place), or done before it came.
      const bool killed = WIFSIGNALED(o.status) && WTERMSIG(o.status) == sig;
      CHECK((killed || (WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0)));
      CHECK((!o.exists || o.size == static_cast<off_t>(kBytes)));
      if (killed && o.exists) during += 1;
    }
  }
  // The cases exercise the write itself, not only its before and after.
  CHECK(during > 0);
}

TEST_CASE("a second signal during file_write_atomic stops it at once and leaves no temporary") {
  const std::string content(kBytes, 'y');
  for (const int delay_us : {0, 500, 2000}) {
    CAPTURE(delay_us);
    test::TempDir dir("fanout-write-signal");
    const Outcome o = write_and_signal(dir / "out.bin", content, SIGTERM, delay_us, 200);
    CHECK(test::temp_leftovers(dir.path).empty());
    CHECK((WIFSIGNALED(o.status) ? WTERMSIG(o.status) == SIGTERM : WEXITSTATUS(o.status) == 0));
    CHECK((!o.exists || o.size == static_cast<off_t>(kBytes)));
  }
}

TEST_CASE("SignalsDeferred leaves a handler the program installed alone") {
  static volatile sig_atomic_t seen = 0;
  seen = 0;
  struct sigaction mine {
  }, before{};
  mine.sa_handler = [](int) { seen = 1; };
  sigemptyset(&mine.sa_mask);
  REQUIRE(::sigaction(SIGHUP, &mine, &before) == 0);
  {
    const SignalsDeferred deferred;
    struct sigaction now {};
    ::sigaction(SIGHUP, nullptr, &now);
    CHECK((now.sa_handler == mine.sa_handler));
    ::raise(SIGHUP);
    CHECK(seen == 1);  // delivered to the program's handler, not held
  }
  ::sigaction(SIGHUP, &before, nullptr);
}
