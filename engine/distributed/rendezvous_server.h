#pragma once
// The rendezvous server that rank 0 runs (see rendezvous.h): one poll-driven
// thread, a key-value store, and one state machine per connection. Anyone may
// connect to the port, so nothing a connection sends can crash, block or
// mislead it: bad frames drop that connection only (one warning line on
// stderr), only connections that said a valid hello may use the store, and
// only their disconnection can make a rank count as dead.
// A hello must carry the job's secret (compared in constant time) and its
// description; a stranger without them learns nothing and holds nothing.
// Internal to engine/parallel.

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "engine/distributed/rendezvous_wire.h"

namespace fanout::distributed {

class RendezvousServer {
 public:
  // Binds addr:port (0: a free port; a fanout::Error naming the problem if it
  // cannot) and serves a job of `world` ranks whose hellos carry `secret` and
  // `job`, until destroyed.
  RendezvousServer(const std::string& addr, int port, int world, std::string secret,
                   std::string job);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  // The port it listens on.
  int port() const { return port_; }

 private:
  using Clock = std::chrono::steady_clock;

  // One connection. It starts unregistered (may only send its hello), becomes a
  // rank once the hello is accepted, and is closed at the end of the poll round
  // in which `closing` is set (so handlers never erase what a loop walks).
  struct Conn {
    std::string peer;  // "1.2.3.4:5678", for warnings
    Clock::time_point since;
    wire::FrameReader in;
    int rank = -1;  // >= 0 once registered
    bool bye = false, closing = false;
    std::string why;  // warning printed when it is closed ("" = a normal close)
    std::vector<char> out;
    size_t out_at = 0;                // replies not yet written (the socket is non-blocking)
    std::deque<std::string> waiting;  // keys of pending gets, in order
    explicit Conn(wire::Limits l) : in(l) {}
  };
  // A rank's place in the job.
  struct Slot {
    int fd = -1;             // its live registered connection
    bool committed = false;  // its holder made a request: the place is taken for good
    bool dead = false;
    bool seen = false;  // it has said hello once
  };

  void serve() noexcept;
  void accept_new();
  void read_from(int fd, Conn& c);
  void handle(int fd, Conn& c, wire::Frame& f);
  void hello(int fd, Conn& c, const wire::Frame& f);
  void set(Conn& c, wire::Frame& f);
  void flush_gets(int fd, Conn& c);
  void send(int fd, Conn& c, char type, const std::vector<char>& value);
  void write_out(int fd, Conn& c);
  void drop(Conn& c, std::string why);
  void reap();
  void warn(const std::string& peer, const std::string& why);
  void publish();

  int world_;
  std::string secret_, job_;
  int listen_fd_ = -1, port_ = 0;
  std::map<int, Conn> conns_;
  std::vector<Slot> slots_;
  std::map<std::string, std::vector<char>> store_;
  std::map<std::string, int> owner_;  // key -> the rank that set it first
  size_t store_bytes_ = 0;
  int warnings_ = 0;

  // Read by the destructor while the thread runs.
  std::atomic<bool> stop_{false}, any_dead_{false};
  std::atomic<int> ranks_live_{0};  // registered connections that have not said bye
  std::thread thread_;
};

}  // namespace fanout::distributed
