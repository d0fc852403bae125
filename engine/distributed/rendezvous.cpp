#include "engine/distributed/rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "engine/core/check.h"
#include "engine/distributed/rendezvous_server.h"
#include "engine/distributed/rendezvous_wire.h"

namespace fanout::distributed {

namespace {
using Clock = std::chrono::steady_clock;

// What a client accepts from the master: replies with no key and a bounded value.
constexpr wire::Limits kReplyLimits{"RE", 0, wire::kMaxValue};
// Rank 0 sets it once every rank has said hello (wait_for_all).
constexpr const char* kEveryRankKey = "fanout/every-rank-said-hello";

// "rank 3", "ranks 1-99999", "ranks 1, 3, 5-9": runs of consecutive ranks as
// ranges, the first eight runs named, so that one line holds any list.
std::string ranks_text(const std::vector<int>& rs) {
  std::string list;
  size_t i = 0;
  for (int runs = 0; i < rs.size() && runs < 8; ++runs) {
    size_t j = i;
    while (j + 1 < rs.size() && rs[j + 1] == rs[j] + 1) ++j;
    if (!list.empty()) list += ", ";
    list += std::to_string(rs[i]);
    if (j > i) list.append("-").append(std::to_string(rs[j]));
    i = j + 1;
  }
  if (i < rs.size()) list += " and " + std::to_string(rs.size() - i) + " more";
  return (rs.size() == 1 ? "rank " : "ranks ") + list;
}

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;  // also SO_SNDTIMEO: a master that stopped reading
    p += w, n -= static_cast<size_t>(w);
  }
  return true;
}

enum class Read { kOk, kClosed, kTimeout, kBad };

// One frame from the master into `f` before `deadline`; kBad sets `why`.
Read read_frame(int fd, wire::Frame& f, Clock::time_point deadline, std::string& why) {
  wire::FrameReader in(kReplyLimits);
  std::vector<char> chunk(64 * 1024);
  while (true) {
    auto st = in.next(f);
    if (st == wire::FrameReader::Status::kFrame) return Read::kOk;
    if (st == wire::FrameReader::Status::kBad) {
      why = in.error();
      return Read::kBad;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return Read::kTimeout;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) return Read::kClosed;
    if (ready <= 0) continue;
    ssize_t n = ::recv(fd, chunk.data(), chunk.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Read::kClosed;
    in.append(chunk.data(), static_cast<size_t>(n));
  }
}

// The next answer from the master before `deadline`, after the `owed` answers
// to earlier ranks requests that stopped waiting (they come first: the master
// answers those at once, in order).
Read read_answer(int fd, int& owed, wire::Frame& f, Clock::time_point deadline, std::string& why) {
  while (owed > 0) {
    Read r = read_frame(fd, f, deadline, why);
    if (r != Read::kOk) return r;
    --owed;
  }
  return read_frame(fd, f, deadline, why);
}

}  // namespace

// --- the client (every rank) ------------------------------------------------

Rendezvous::Rendezvous(const RendezvousOptions& o)
    : Rendezvous(o, o.rank == 0 && o.world > 0 ? serve(o) : nullptr) {}

Rendezvous::Rendezvous(const RendezvousOptions& o, std::unique_ptr<RendezvousServer> server)
    : rank_(o.rank), world_(o.world), timeout_(o.timeout), server_(std::move(server)) {
  FANOUT_CHECK(o.world > 0 && o.rank >= 0 && o.rank < o.world, "RANK ", o.rank,
               " does not fit WORLD_SIZE ", o.world);
  FANOUT_CHECK(o.port > 0 && o.port < 65536, "MASTER_PORT ", o.port, " is not a port number");
  FANOUT_CHECK(o.rank != 0 || server_, "rank 0 needs the rendezvous server");
  connect_and_hello(o.addr, o.port, o.secret, o.job);
}

Rendezvous::Rendezvous(const std::string& addr, int port, int rank, int world,
                       std::chrono::milliseconds timeout)
    : Rendezvous(RendezvousOptions{addr, port, rank, world, timeout, "", ""}) {}

std::unique_ptr<RendezvousServer> Rendezvous::serve(const RendezvousOptions& o) {
  FANOUT_CHECK(o.world > 0, "WORLD_SIZE ", o.world, " is not a world size");
  FANOUT_CHECK(o.port >= 0 && o.port < 65536, "MASTER_PORT ", o.port, " is not a port number");
  FANOUT_CHECK(o.secret.size() <= wire::kMaxSecret && o.secret.find('\n') == std::string::npos,
               "the job secret must be one line of at most ", wire::kMaxSecret, " bytes");
  FANOUT_CHECK(o.job.size() <= wire::kMaxJob && o.job.find('\n') == std::string::npos,
               "the job description must be one line of at most ", wire::kMaxJob, " bytes");
  return std::make_unique<RendezvousServer>(o.addr, o.port, o.world, o.secret, o.job);
}

void Rendezvous::connect_and_hello(const std::string& addr, int port, const std::string& secret,
                                   const std::string& job) {
  sockaddr_in sa = wire::resolve_master(addr, port);
  master_ = addr + ":" + std::to_string(port);
  const std::string& where = master_;
  double seconds = timeout_.count() / 1000.0;
  auto deadline = Clock::now() + timeout_;
  while (true) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FANOUT_CHECK(fd_ >= 0, "cannot create a socket: ", std::strerror(errno));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(fd_);
      fd_ = -1;
      FANOUT_CHECK(Clock::now() < deadline, "rank ", rank_, ": cannot reach the master at ", where,
                   " within ", seconds, " s (is rank 0 running?)");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // A master that stops reading must not block a send forever either.
    timeval tv{static_cast<time_t>(timeout_.count() / 1000),
               static_cast<suseconds_t>(timeout_.count() % 1000 * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    auto hello = wire::frame_encode(wire::kHello, std::to_string(rank_),
                                    wire::hello_value(world_, job, secret));
    wire::Frame f;
    std::string why;
    Read r = write_all(fd_, hello.data(), hello.size()) ? read_frame(fd_, f, deadline, why)
                                                        : Read::kClosed;
    if (r == Read::kOk && f.type == wire::kReply && f.value.empty() && f.key.empty()) {
      sockaddr_in self{};
      socklen_t len = sizeof self;
      char text[INET_ADDRSTRLEN] = "127.0.0.1";
      if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&self), &len) == 0)
        inet_ntop(AF_INET, &self.sin_addr, text, sizeof text);
      local_address_ = text;
      return;
    }
    ::close(fd_);
    fd_ = -1;
    FANOUT_CHECK(!(r == Read::kOk && f.type == wire::kRefused), "rank ", rank_, ": the master at ",
                 where, " refused this rank: ", wire::printable({f.value.data(), f.value.size()}));
    FANOUT_CHECK(r != Read::kOk && r != Read::kBad, "rank ", rank_, ": what answers at ", where,
                 " is not a fanout master (",
                 why.empty() ? std::string("an unexpected answer to its hello") : why, ")");
    FANOUT_CHECK(r != Read::kTimeout, "rank ", rank_, ": no answer from the master at ", where,
                 " within ", seconds, " s");
    // Closed before answering: a master under a flood of connections drops the
    // oldest that have not said hello yet. Try again while there is time.
    FANOUT_CHECK(Clock::now() < deadline, "rank ", rank_, ": the master at ", where,
                 " closed the connection before answering its hello");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Rendezvous::~Rendezvous() {
  if (fd_ >= 0) {
    try {
      send_request(wire::kBye, "", {});
    } catch (...) {
    }
    ::close(fd_);
  }
  server_.reset();
}

void Rendezvous::send_request(char type, const std::string& key, const std::vector<char>& value) {
  FANOUT_CHECK(key.size() <= wire::kMaxKey && value.size() <= wire::kMaxValue, "rank ", rank_,
               ": a rendezvous key of ", key.size(), " bytes or value of ", value.size(),
               " bytes is over the limit (", wire::kMaxKey, " and ", wire::kMaxValue, ")");
  auto m = wire::frame_encode(type, key, value);
  FANOUT_CHECK(write_all(fd_, m.data(), m.size()), "rank ", rank_,
               ": lost the connection to the master (rank 0)");
}

std::vector<char> Rendezvous::read_reply(std::chrono::milliseconds timeout,
                                         const std::string& key) {
  wire::Frame f;
  std::string why;
  Read r = read_answer(fd_, owed_, f, Clock::now() + timeout, why);
  // The master answers a get once another rank has set the key.
  FANOUT_CHECK(r != Read::kTimeout || key.empty(), "rank ", rank_, ": no rank set the key '",
               wire::printable(key), "' within ", timeout.count() / 1000.0, " s");
  FANOUT_CHECK(r != Read::kTimeout, "rank ", rank_, ": no answer from the master within ",
               timeout.count() / 1000.0, " s");
  FANOUT_CHECK(r != Read::kClosed, "rank ", rank_, ": the master (rank 0) closed the connection");
  FANOUT_CHECK(r == Read::kOk && f.type == wire::kReply && f.key.empty(), "rank ", rank_,
               ": the master sent a malformed reply (",
               why.empty() ? std::string("an unexpected message") : why, ")");
  return std::move(f.value);
}

void Rendezvous::set(const std::string& key, const std::vector<char>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  send_request(wire::kSet, key, value);
}

std::vector<char> Rendezvous::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  send_request(wire::kGet, key, {});
  return read_reply(timeout_, key);
}

std::optional<std::vector<int>> Rendezvous::rank_list(char request) {
  std::lock_guard<std::mutex> lock(mu_);
  bool closed = false;
  return ask_ranks(request, std::chrono::milliseconds(2000), closed);
}

std::optional<std::vector<int>> Rendezvous::ask_ranks(char request,
                                                      std::chrono::milliseconds within,
                                                      bool& closed) {
  const std::vector<char> m = wire::frame_encode(request, "", {});
  if (fd_ < 0 || !write_all(fd_, m.data(), m.size())) {
    closed = true;
    return std::nullopt;
  }
  wire::Frame f;
  std::string why;
  Read r = read_answer(fd_, owed_, f, Clock::now() + within, why);
  if (r == Read::kTimeout) ++owed_;
  closed = r == Read::kClosed;
  if (r != Read::kOk || f.type != wire::kReply || !f.key.empty()) return std::nullopt;
  // "2,5": ranks in [0, world); anything else is not what a fanout master says.
  std::vector<int> out;
  std::string_view s(f.value.data(), f.value.size());
  while (!s.empty()) {
    size_t comma = s.find(',');
    auto rank = wire::parse_int(s.substr(0, comma), 0, world_ - 1);
    if (!rank || (comma != std::string_view::npos && comma + 1 == s.size())) return std::nullopt;
    out.push_back(static_cast<int>(*rank));
    s.remove_prefix(comma == std::string_view::npos ? s.size() : comma + 1);
  }
  return out;
}

std::optional<std::vector<int>> Rendezvous::dead_ranks_known(std::chrono::milliseconds within) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  bool closed = false;
  std::optional<std::vector<int>> dead = ask_ranks(wire::kDead, within, closed);
  if (closed) return std::vector<int>{0};
  return dead;
}

std::vector<int> Rendezvous::dead_ranks() {
  return rank_list(wire::kDead).value_or(std::vector<int>{0});  // no answer: the master is gone
}

std::vector<int> Rendezvous::absent_ranks() {
  return rank_list(wire::kAbsent).value_or(std::vector<int>{});
}

std::string Rendezvous::describe_failure() {
  // A peer's collective can fail before the server has seen the dead rank's
  // connection drop: give it a moment.
  std::vector<int> dead = dead_ranks();
  for (int i = 0; i < 20 && dead.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    dead = dead_ranks();
  }
  if (dead == std::vector<int>{0} && rank_ != 0) return "the master (rank 0) died";
  if (!dead.empty()) return ranks_text(dead) + " died";
  // A rank that never started (or cannot reach the master) leaves the others
  // waiting for its keys: name it rather than blame nobody.
  std::vector<int> absent = absent_ranks();
  if (!absent.empty()) return ranks_text(absent) + " never connected";
  return "no rank has died";
}

void Rendezvous::wait_for_all(std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + std::max(within, std::chrono::milliseconds(0));
  auto never_came = [&](const std::vector<int>& absent) {
    return detail::str_cat("rank ", rank_, ": ", ranks_text(absent), " of ", world_,
                           " never connected to the master at ", master_, " within ",
                           timeout_.count() / 1000.0,
                           " s; start every rank of the job (or correct its world size)");
  };
  if (rank_ == 0) {
    // The master's own rank asks its server, then tells the others.
    while (true) {
      std::optional<std::vector<int>> absent = rank_list(wire::kAbsent);
      FANOUT_CHECK(absent.has_value(), "rank 0: its rendezvous server at ", master_,
                   " stopped answering");
      if (absent->empty()) return set(kEveryRankKey, {});
      if (Clock::now() >= deadline) detail::throw_error(never_came(*absent));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  Read r = Read::kBad;
  wire::Frame f;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    send_request(wire::kGet, kEveryRankKey, {});
    r = read_answer(fd_, owed_, f, deadline, why);
  }
  if (r == Read::kOk && f.type == wire::kReply && f.key.empty()) return;
  FANOUT_CHECK(r != Read::kClosed, "rank ", rank_, ": the master (rank 0) at ", master_,
               " closed the connection before every rank had connected (rank 0 says why)");
  if (r == Read::kTimeout) {
    std::vector<int> absent = absent_ranks();
    FANOUT_CHECK(!absent.empty(), "rank ", rank_, ": the master at ", master_,
                 " did not see every rank connect within ", timeout_.count() / 1000.0, " s");
    detail::throw_error(never_came(absent));
  }
  detail::throw_error(detail::str_cat("rank ", rank_, ": the master sent a malformed reply (",
                                      why.empty() ? std::string("an unexpected message") : why,
                                      ")"));
}

}  // namespace fanout::distributed
