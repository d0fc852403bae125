#include "tests/engine/distributed/rendezvous_test_util.h"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "tests/apps/fanout/cli_runner.h"

namespace fanout::test::rdzv {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kTimeout = std::chrono::milliseconds(2000);

sockaddr_in loopback(int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return sa;
}

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<char>& v) {
  return {v.begin(), v.end()};
}
}  // namespace

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in sa = loopback(0);
  socklen_t len = sizeof sa;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot find a free port");
  return ntohs(sa.sin_port);
}

std::string u32_be(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string frame(char type, const std::string& key, const std::string& value) {
  return std::string(1, type) + u32_be(static_cast<uint32_t>(key.size())) + key +
         u32_be(static_cast<uint32_t>(value.size())) + value;
}

std::string ack() {
  return frame('R', "");
}

std::string hello(const std::string& rank, const std::string& world, const std::string& secret,
                  const std::string& job) {
  return frame('H', rank, world + "\n" + job + "\n" + secret);
}

distributed::RendezvousOptions job_options(int port, int rank, int world) {
  return {"127.0.0.1", port, rank, world, kTimeout, kSecret, kJobName};
}

// --- Job -------------------------------------------------------------------------

Job::Job(int world_size, int joined) : port(free_port()), world(world_size) {
  for (int r = 0; r < joined; ++r) join(r);
}

Job::~Job() {
  while (!ranks.empty()) ranks.pop_back();
}

void Job::join(int rank) {
  REQUIRE(static_cast<int>(ranks.size()) == rank);
  ranks.push_back(std::make_unique<distributed::Rendezvous>(job_options(port, rank, world)));
}

void Job::publish() {
  for (int r = 0; r < world; ++r)
    (*this)[r].set("key/" + std::to_string(r), bytes("value of rank " + std::to_string(r)));
}

void Job::check_intact(const std::string& tag) {
  for (int r = 0; r < world; ++r)
    for (int k = 0; k < world; ++k) {
      CAPTURE(r);
      CAPTURE(k);
      CHECK(text((*this)[r].get("key/" + std::to_string(k))) ==
            "value of rank " + std::to_string(k));
    }
  for (int r = 0; r < world; ++r)
    (*this)[r].set(tag + "/" + std::to_string(r), bytes(tag + " of " + std::to_string(r)));
  for (int r = 0; r < world; ++r) {
    int from = (r + 1) % world;
    CHECK(text((*this)[r].get(tag + "/" + std::to_string(from))) ==
          tag + " of " + std::to_string(from));
    CHECK((*this)[r].dead_ranks().empty());
  }
}

// --- Stranger --------------------------------------------------------------------

Stranger::Stranger(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa = loopback(port);
  REQUIRE(fd_ >= 0);
  REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
}

Stranger::~Stranger() {
  close();
}

void Stranger::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Stranger::send(const std::string& b) {
  send_all(fd_, b);
}

std::string Stranger::read_until_closed(double seconds, bool& closed) {
  std::string got;
  closed = false;
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {  // EOF, or ECONNRESET: the master dropped us
      closed = true;
      return got;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

std::string Stranger::read_n(size_t n) {
  std::string got;
  auto deadline = Clock::now() + std::chrono::seconds(2);
  char buf[256];
  while (got.size() < n && Clock::now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - got.size()), 0);
    if (r <= 0) break;
    got.append(buf, static_cast<size_t>(r));
  }
  return got;
}

void send_all(int fd, const std::string& b) {
  size_t at = 0;
  while (at < b.size()) {
    ssize_t w = ::send(fd, b.data() + at, b.size() - at, MSG_NOSIGNAL);
    if (w <= 0) return;  // the master may already have dropped us: that is allowed
    at += static_cast<size_t>(w);
  }
}

std::string drain(int fd, int ms) {
  std::string got;
  auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) {
      if (!got.empty()) return got;  // a request arrives in one piece on loopback
      continue;
    }
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// --- FakeMaster ------------------------------------------------------------------

FakeMaster::FakeMaster(std::function<void(int fd)> script) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa = loopback(0);
  socklen_t len = sizeof sa;
  REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::listen(listen_fd_, 4) == 0);
  REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  port_ = ntohs(sa.sin_port);
  thread_ = std::thread([this, script] {
    int fd = -1;
    while (!stop_ && fd < 0) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) fd = ::accept(listen_fd_, nullptr, nullptr);
    }
    if (fd < 0) return;
    script(fd);
    while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::close(fd);
  });
}

FakeMaster::~FakeMaster() {
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
}

// --- StderrCapture -------------------------------------------------------------------

StderrCapture::StderrCapture() {
  path_ = make_temp_dir("fanout-rdzv") + "/stderr";
  std::fflush(stderr);
  saved_ = ::dup(2);
  int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
}

StderrCapture::~StderrCapture() {
  std::fflush(stderr);
  ::dup2(saved_, 2);
  ::close(saved_);
  std::remove(path_.c_str());
  ::rmdir(path_.substr(0, path_.rfind('/')).c_str());
}

std::string StderrCapture::text() {
  std::fflush(stderr);
  std::ifstream in(path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --- process groups over a Job -------------------------------------------------------

void on_every_rank(int world, const std::function<void(int rank)>& fn) {
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

std::vector<std::unique_ptr<distributed::ProcessGroup>> gloo_groups(Job& job, double timeout_s) {
  REQUIRE(static_cast<int>(job.ranks.size()) == job.world);
  std::vector<std::unique_ptr<distributed::ProcessGroup>> groups(static_cast<size_t>(job.world));
  on_every_rank(job.world,
                [&](int r) { groups[r] = distributed::make_gloo_group(job[r], timeout_s); });
  return groups;
}

}  // namespace fanout::test::rdzv
