#include "apps/train/stop_signals.h"

#include <atomic>

namespace fanout::train {

// Note [Stopping on a signal]: Ctrl-C (SIGINT) and SIGTERM (what kill, schedulers
// and container runtimes send) both finish the step, write a checkpoint and exit
// with 128 + the signal's number (130, 143). A second signal stops at once, as
// does any signal once the training loop is over.
// Under fanout launch one Ctrl-C can arrive twice: from the terminal, which
// signals the whole foreground process group (or a kill of the launch's process
// group), and again from the launcher, which passes signals on (Note [Ctrl-C
// under launch] in apps/fanout/cmd_launch.cpp). A signal sent by the launcher
// (SI_USER from relay_pid) while this rank already stops for one is that same
// request, not a second one.

namespace {
std::atomic<int> g_stop_signal{0};      // the signal taken, 0 for none
std::atomic<bool> g_collecting{false};  // the loop runs: a first signal asks it to stop
std::atomic<pid_t> g_relay_pid{0};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free);

// Dies of `sig` as if no handler had been installed.
void die_of(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // blocked while this handler runs: delivered as it returns
}

extern "C" void on_stop_signal(int sig, siginfo_t* info, void*) {
  const pid_t relay = g_relay_pid.load();
  const bool from_relay =
      relay != 0 && info != nullptr && info->si_code == SI_USER && info->si_pid == relay;
  if (g_stop_signal.load() != 0 && from_relay) return;  // the launcher passing on the same stop
  if (g_stop_signal.load() == 0 && g_collecting.load()) {
    g_stop_signal = sig;
    return;
  }
  die_of(sig);
}
}  // namespace

StopSignals::StopSignals(pid_t relay_pid) {
  g_stop_signal = 0;
  g_relay_pid = relay_pid;
  g_collecting = true;
  struct sigaction sa {};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &int_);
  ::sigaction(SIGTERM, &sa, &term_);
}

StopSignals::~StopSignals() {
  restore();
}

int StopSignals::requested() const {
  return g_stop_signal.load();
}

void StopSignals::restore() {
  if (restored_) return;
  restored_ = true;
  g_collecting = false;
  if (g_stop_signal.load() != 0 && g_relay_pid.load() != 0) return;
  ::sigaction(SIGINT, &int_, nullptr);
  ::sigaction(SIGTERM, &term_, nullptr);
}

}  // namespace fanout::train
