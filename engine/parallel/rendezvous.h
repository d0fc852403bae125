#pragma once
// Rendezvous for multi-process runs (torchrun's MASTER_ADDR / MASTER_PORT): rank 0
// serves a small key-value store over TCP, every rank (rank 0 too) keeps one
// connection to it. It carries what the collective libraries need to meet (Gloo
// addresses, the NCCL unique id) and doubles as a liveness channel: the server
// notices a rank whose connection drops, so a failure can name the dead rank.
// Data never flows through it: collectives go through Gloo or NCCL.

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
  // Rank 0 binds addr:port (an error if it is in use) and serves; the others
  // connect, retrying until `timeout`. Throws fanout::Error naming the problem.
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
  void send_request(char type, const std::string& key, const std::vector<char>& value);
  std::vector<char> read_reply(std::chrono::milliseconds timeout);

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<RendezvousServer> server_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace fanout::parallel
