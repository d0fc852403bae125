#pragma once
// Rendezvous for multi-process runs (torchrun's MASTER_ADDR / MASTER_PORT): rank 0
// serves a small key-value store over TCP, every rank (rank 0 too) keeps one
// connection to it. It carries what the collective libraries need to meet (Gloo
// addresses, the NCCL unique id) and doubles as a liveness channel: the server
// notices a rank whose connection drops, so a failure can name the dead rank.
// Data never flows through it: collectives go through Gloo or NCCL.
// Anything may connect to the port: the server (rendezvous_server.h) serves only
// connections that said a valid hello, and the client bounds what it accepts.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fanout::parallel {

class RendezvousServer;

class Rendezvous {
 public:
  // Rank 0 binds addr:port (an error if it is in use) and serves; every rank
  // connects, retrying until `timeout`, and says hello; the master answers it
  // (or refuses it: the rank is taken, the world size differs). Throws
  // fanout::Error naming the problem.
  Rendezvous(const std::string& addr, int port, int rank, int world,
             std::chrono::milliseconds timeout);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  void set(const std::string& key, const std::vector<char>& value);
  // Blocks until the key exists (or the timeout passes: fanout::Error).
  std::vector<char> get(const std::string& key);
  // Ranks whose connection closed without saying goodbye; {0} when the master
  // itself is gone. Never throws.
  std::vector<int> dead_ranks();
  // "rank 2 died", "the master (rank 0) died", or "no rank has died".
  std::string describe_failure();

 private:
  void connect_and_hello(const std::string& addr, int port);
  void send_request(char type, const std::string& key, const std::vector<char>& value);
  // The value of the master's next reply; fanout::Error on a timeout, a closed
  // connection, a refusal or anything that is not a well-formed, bounded reply.
  std::vector<char> read_reply(std::chrono::milliseconds timeout);

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<RendezvousServer> server_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace fanout::parallel
