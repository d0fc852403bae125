#pragma once
// Helpers for the rendezvous tests, all on 127.0.0.1: a job of real Rendezvous
// ranks in this process, a raw-socket "stranger" that sends arbitrary bytes to
// the master, a fake master that answers with arbitrary bytes, hand-built wire
// frames (independent of rendezvous_wire.cpp), and a capture of stderr.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/distributed/process_group.h"
#include "engine/distributed/rendezvous.h"

namespace fanout::test::rdzv {

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// [type][key length u32 BE][key][value length u32 BE][value], built by hand.
std::string u32_be(uint32_t v);
std::string frame(char type, const std::string& key, const std::string& value = "");
// The master's answer to an accepted hello.
std::string ack();

// Every Job's secret and description.
inline const std::string kSecret = "0123456789abcdef-test-secret";
inline const std::string kJobName = "test-job";
// A hello as a real rank sends it: key = rank, value = "<world>\n<job>\n<secret>".
std::string hello(const std::string& rank, const std::string& world,
                  const std::string& secret = kSecret, const std::string& job = kJobName);
// The options of rank `rank` of a `world`-rank Job on `port`.
distributed::RendezvousOptions job_options(int port, int rank, int world);

// Ranks 0..joined-1 of a `world`-rank job (rank 0 serves); more join later.
// Ranks are destroyed from the highest to rank 0, as a real job ends.
struct Job {
  int port, world;
  std::vector<std::unique_ptr<distributed::Rendezvous>> ranks;
  Job(int world, int joined);
  ~Job();
  void join(int rank);
  distributed::Rendezvous& operator[](int r) { return *ranks.at(static_cast<size_t>(r)); }

  // Every rank sets "key/<rank>" to "value of rank <rank>".
  void publish();
  // Every key publish() set reads back unchanged from every rank, a new round of
  // set/get with `tag` works, and no rank is reported dead.
  void check_intact(const std::string& tag);
};

// A raw connection to the master's port.
class Stranger {
 public:
  explicit Stranger(int port);
  ~Stranger();
  Stranger(const Stranger&) = delete;
  Stranger& operator=(const Stranger&) = delete;
  void send(const std::string& bytes);
  // What the master sends until it closes the connection (closed = true) or
  // `seconds` pass (closed = false).
  std::string read_until_closed(double seconds, bool& closed);
  // Exactly n bytes (or fewer if the connection closes or 2 s pass).
  std::string read_n(size_t n);
  void close();

 private:
  int fd_ = -1;
};

// A listening socket that is not a fanout master: it accepts one connection and
// runs `script` on it (in a thread), then holds it open until destroyed.
class FakeMaster {
 public:
  explicit FakeMaster(std::function<void(int fd)> script);
  ~FakeMaster();
  int port() const { return port_; }

 private:
  int listen_fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};
// Reads what the peer sent on `fd` for up to `ms` milliseconds.
std::string drain(int fd, int ms);
void send_all(int fd, const std::string& bytes);

// Redirects this process's stderr to a file while it lives.
class StderrCapture {
 public:
  StderrCapture();
  ~StderrCapture();
  std::string text();  // everything written so far

 private:
  int saved_ = -1;
  std::string path_;
};

double seconds_since(std::chrono::steady_clock::time_point t0);

// Runs fn(rank) for ranks 0..world-1, each on its own thread, and rethrows the
// first exception on the calling thread once all have finished.
void on_every_rank(int world, const std::function<void(int rank)>& fn);

// One Gloo process group per rank of a whole `job`, connected on one thread per
// rank (each rank's connectFullMesh waits for the others). Destroy them before the job.
std::vector<std::unique_ptr<distributed::ProcessGroup>> gloo_groups(Job& job, double timeout_s);

}  // namespace fanout::test::rdzv
