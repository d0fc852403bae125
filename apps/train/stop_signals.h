#pragma once
// Ctrl-C (SIGINT) and SIGTERM during training (Note [Stopping on a signal]): the
// first asks the training loop to stop after its step and checkpoint; a second
// stops the process at once. A rank of fanout launch also hears from its
// launcher, which passes a signal on: a repeat of the one it already took is
// not a second signal.

#include <sys/types.h>

#include <csignal>

namespace fanout::train {

class StopSignals {
 public:
  // Installs the handlers. `relay_pid`: the launcher that passes signals on to
  // this process (its parent under fanout launch), 0 for none.
  explicit StopSignals(pid_t relay_pid = 0);
  // restore()
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal that asked the loop to stop (SIGINT or SIGTERM), 0 while none has.
  int requested() const;
  // The loop is over: any signal now stops the process at once. The previous
  // handlers come back, except after a signal under a relaying launcher: its
  // relay may still be on the way, and must not kill a rank that is writing its
  // checkpoint, so the handler stays, ignoring that relay alone. Idempotent.
  void restore();

 private:
  struct sigaction int_ {
  }, term_{};
  bool restored_ = false;
};

}  // namespace fanout::train
