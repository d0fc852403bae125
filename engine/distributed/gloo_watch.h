#pragma once
// GlooWatch: ends the waits on a Gloo context as soon as the rendezvous knows
// that a rank died, instead of at the timeout.
//
// Gloo notices a dead peer through its sockets, but it does not wake every wait:
// a send already handed to the pair (its receiver had posted the receive) is
// left waiting when the pair fails, until the timeout (5 minutes by default).
// The rendezvous' master sees the dead rank's connection drop (its liveness
// channel, rendezvous.h). So every wait on our unbound buffers goes through the
// watch (wait_recv / wait_send): once a wait has lasted kLook, the watch's thread
// asks the master for dead ranks every kLook; when one is named it aborts every
// wait in progress and refuses every later one, and the context is never used
// again. Short waits, the usual ones, never ask.
//
// A wait the watch ended throws std::runtime_error(kEnded). Its buffers, and the
// memory they point into, must then outlive gloo's loop thread, which may still
// complete them: keep_for_process() (Note [Buffers of a failed exchange]).
// Internal to engine/distributed and engine/comm.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gloo/transport/unbound_buffer.h>

#include "engine/distributed/rendezvous.h"

namespace fanout::distributed {

class GlooWatch {
 public:
  static constexpr std::chrono::milliseconds kLook{250};
  static constexpr const char* kEnded = "stopped waiting when the rendezvous saw a rank die";

  // `rendezvous` must outlive the watch.
  explicit GlooWatch(Rendezvous& rendezvous);
  ~GlooWatch();
  GlooWatch(const GlooWatch&) = delete;
  GlooWatch& operator=(const GlooWatch&) = delete;

  using Deadline = std::chrono::steady_clock::time_point;

  // b.waitRecv / b.waitSend until `deadline` (at least 1 ms from now: gloo takes
  // 0 as unset), ended early by a dead rank. Throws what gloo throws, or
  // std::runtime_error(kEnded).
  void wait_recv(gloo::transport::UnboundBuffer& b, Deadline deadline);
  void wait_send(gloo::transport::UnboundBuffer& b, Deadline deadline);

  // Whether the watch has seen a rank die.
  bool fired() const;
  // `cause` (what a failed wait threw), or kEnded once the watch has fired.
  std::string cause(const std::string& cause) const { return fired() ? kEnded : cause; }

 private:
  void wait(gloo::transport::UnboundBuffer& b, Deadline deadline, bool send);
  void enter(gloo::transport::UnboundBuffer* b);
  void leave(gloo::transport::UnboundBuffer* b);
  void loop();

  Rendezvous& rendezvous_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::multiset<gloo::transport::UnboundBuffer*> waiting_;  // waits in progress
  uint64_t stretch_ = 0;                                    // counts the times waiting_ left empty
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;
};

// Note [Buffers of a failed exchange]
// After a failure gloo's loop thread may still complete a collective's sends and
// receives (a late peer's data, an error completion): destroying their buffers,
// or freeing the memory they point into, would race with it. So they are kept,
// with whatever owns that memory, for the rest of the process: a failed group or
// communicator is never used again, and the leak is one collective's buffers per
// failure.
void keep_for_process(std::shared_ptr<void> what);

}  // namespace fanout::distributed
