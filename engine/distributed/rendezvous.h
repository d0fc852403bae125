#pragma once
// Rendezvous for multi-process runs (torchrun's MASTER_ADDR / MASTER_PORT): rank 0
// serves a small key-value store over TCP, every rank (rank 0 too) keeps one
// connection to it. It carries what the collective libraries need to meet (Gloo
// addresses, the NCCL unique id) and doubles as a liveness channel: the server
// notices a rank whose connection drops, so a failure can name the dead rank.
// Data never flows through it: collectives go through Gloo or NCCL.
// Anything may connect to the port: the server (rendezvous_server.h) serves only
// connections whose hello carries the job's secret and world description, and
// the client bounds what it accepts.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace fanout::distributed {

class RendezvousServer;

// The most ranks a Gloo full mesh (--devices cpu) can join through the
// rendezvous: every rank publishes the address of its pair with each other rank
// (136 bytes apiece) in rank 0's store, whose 256 MiB hold W (W - 1) of them for
// W up to 1405. 1024 keeps a margin (gloo_mesh.cpp checks the sum).
constexpr int kMaxGlooWorld = 1024;

struct RendezvousOptions {
  std::string addr;  // the master's address (MASTER_ADDR)
  int port = 0;      // its port (MASTER_PORT); 0 only for serve(): a free port
  int rank = 0, world = 1;
  std::chrono::milliseconds timeout{300000};
  // Every hello must carry the same secret (fanout launch generates one; the
  // other launchers' come from their environment) and the same description of
  // the job (launcher, job id, world size); "" is a value like any other.
  std::string secret, job;
};

class Rendezvous {
 public:
  // Rank 0 binds addr:port (an error if it is in use) and serves; every rank
  // connects, retrying until the timeout, and says hello; the master answers it
  // (or refuses it: a wrong secret or job, the rank is taken, the world size
  // differs). Throws fanout::Error naming the problem.
  explicit Rendezvous(const RendezvousOptions& options);
  // Rank 0 with a server started beforehand by serve() (to publish its port elsewhere first).
  Rendezvous(const RendezvousOptions& options, std::unique_ptr<RendezvousServer> server);
  // No secret and no job description: for tests and worlds the caller trusts.
  Rendezvous(const std::string& addr, int port, int rank, int world,
             std::chrono::milliseconds timeout);
  ~Rendezvous();

  // The server rank 0 runs, bound to options.addr:options.port (0: a free port;
  // RendezvousServer::port() tells which).
  static std::unique_ptr<RendezvousServer> serve(const RendezvousOptions& options);
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // This host's address on its connection to the master ("10.0.0.2"): the
  // interface the other ranks reach it on, for Gloo to listen on (a hostname may
  // resolve to a loopback address, or to one of another network namespace).
  const std::string& local_address() const { return local_address_; }

  void set(const std::string& key, const std::vector<char>& value);
  // Blocks until the key exists (or the timeout passes: fanout::Error).
  std::vector<char> get(const std::string& key);
  // Ranks whose connection closed without saying goodbye; {0} when the master
  // itself is gone. Never throws.
  std::vector<int> dead_ranks();
  // For a watch over a collective that waits (gloo_watch.h): the ranks the master
  // knows dead, {0} when the connection to it is closed, or nullopt when that is
  // not known now (no answer within `within`, or the connection busy with another
  // request: the watch asks again later). Unlike dead_ranks, a slow master is
  // never taken for a dead one. Never throws.
  std::optional<std::vector<int>> dead_ranks_known(std::chrono::milliseconds within);
  // Ranks that have never said hello to the master (never started, or cannot
  // reach it); {} when the master cannot be asked. Never throws.
  std::vector<int> absent_ranks();
  // "rank 2 died", "the master (rank 0) died", "rank 1 never connected" or
  // "no rank has died".
  std::string describe_failure();
  // Blocks until every rank of the world has said hello to the master, within
  // `within`; else throws fanout::Error naming the ranks that never did. Start-up
  // meets here before building anything per peer: a Gloo or NCCL mesh half
  // built for absent ranks takes long to tear down (Gloo: about 10 ms a pair).
  void wait_for_all(std::chrono::milliseconds within);

 private:
  void connect_and_hello(const std::string& addr, int port, const std::string& secret,
                         const std::string& job);
  void send_request(char type, const std::string& key, const std::vector<char>& value);
  // The value of the master's next reply; fanout::Error on a timeout, a closed
  // connection, a refusal or anything that is not a well-formed, bounded reply.
  // `key`: the key a get waits for, named in its timeout error.
  std::vector<char> read_reply(std::chrono::milliseconds timeout, const std::string& key = "");
  // Asks for a list of ranks ('D' or 'A'); nullopt when the master cannot be
  // asked or answers anything but ranks in [0, world).
  std::optional<std::vector<int>> rank_list(char request);
  // rank_list's exchange, with mu_ held: `closed` tells a connection found
  // closed from an answer that did not come within `within` (then owed).
  std::optional<std::vector<int>> ask_ranks(char request, std::chrono::milliseconds within,
                                            bool& closed);

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  std::string master_;  // "addr:port", for messages
  std::string local_address_;
  std::unique_ptr<RendezvousServer> server_;
  int fd_ = -1;
  // Answers to ranks requests that stopped waiting for them: the master still
  // sends them, ahead of the next answer. Under mu_.
  int owed_ = 0;
  std::mutex mu_;
};

}  // namespace fanout::distributed
