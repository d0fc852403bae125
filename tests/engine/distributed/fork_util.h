#pragma once
// Forked children for tests that need real OS processes (a rank that dies must
// take its sockets with it): Note [Forking the test binary]. A forked child
// holds only the thread that forked, so a test forks every child before it
// starts any thread of its own (the binary's one other thread, OpenBLAS's pool,
// is stopped by OpenBLAS's own fork handler), and a child touches nothing the
// parent built: it makes its rendezvous and groups itself, never asserts through
// doctest, and leaves with _exit(code) so doctest and the static destructors do
// not run twice. The parent reaps the children with waitpid against a deadline
// and kills what is left: no test hangs or leaves a process behind.

#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fanout::test::fork {

// A result that differs from the direct computation: the child exits with kMismatch.
struct Mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};
constexpr int kMismatch = 2, kFanoutError = 1, kOtherError = 4;

// What a child ran into, as the parent saw it.
struct Outcome {
  std::string ended;  // "exit 0", "signal 13 (Broken pipe)" or "killed at the deadline"
  std::string said;   // what the child reported through its pipe
};

// Forks `world` children, child r running fn(r) (Note [Forking the test binary]):
// it exits 0 when fn returns, kFanoutError / kMismatch / kOtherError when fn throws,
// and reports fn's result or the error through a pipe (errors to stderr too). The
// parent waits up to deadline_s, then kills the children still running.
std::vector<Outcome> run_children(int world, double deadline_s,
                                  const std::function<std::string(int rank)>& fn);

// An int every child sees (anonymous shared memory, mapped before the fork).
class SharedCounter {
 public:
  SharedCounter();
  ~SharedCounter();
  SharedCounter(const SharedCounter&) = delete;
  SharedCounter& operator=(const SharedCounter&) = delete;
  std::atomic<int>& operator*() { return *static_cast<std::atomic<int>*>(p_); }

 private:
  void* p_;
};

}  // namespace fanout::test::fork
