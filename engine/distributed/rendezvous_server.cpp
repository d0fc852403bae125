#include "engine/distributed/rendezvous_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/core/check.h"

namespace fanout::distributed {

// Note [Rendezvous connection states]
// A connection is unregistered until its first frame, which must be a hello
// carrying the job's secret, then the same job description and world size, and
// naming a rank in [0, world); then it is that rank. A wrong secret is refused
// before anything else is looked at, so a stranger learns nothing about the job.
//   unregistered: only a small 'H' frame is read; anything else, a bad hello,
//     or a hello for a rank that is taken (see below) drops it. Its closing
//     never marks anyone dead. At most kMaxUnregistered exist (the oldest goes
//     first) and each lives at most kHelloWithin without a hello: strangers
//     cannot pile up or hold the job.
//   rank R: set/get/dead/bye. A second hello, a bad frame, a set of a key that
//     another rank set, or too many pending gets or unread replies drop it.
//     Its closing without a bye (or being dropped) marks R dead.
// A rank's place is taken while its connection lives, and for good once that
// connection made a request (others may rely on its keys: its death must stay
// reported). A registration that vanished after its hello alone left nothing
// behind (it may have been a stranger claiming R before R came): a new hello
// for R takes the place back and clears R's death.
namespace {
using wire::Limits;
constexpr Limits kHelloLimits{"H", wire::kMaxHelloField, wire::kMaxHelloValue};
constexpr Limits kRankLimits{"HSGDAB", wire::kMaxKey, wire::kMaxValue};
constexpr Limits kAfterBye{"", 0, 0};
constexpr size_t kMaxUnregistered = 64;
constexpr auto kHelloWithin = std::chrono::seconds(10);
constexpr size_t kMaxWaiting = 64;  // pending gets of one rank (a real rank has at most one)
constexpr size_t kMaxUnsent = 2 * wire::kMaxValue + 4096;  // replies a rank has not read
constexpr int kMaxWarnings = 20;
constexpr size_t kReadChunk = 64 * 1024;

std::string peer_of(const sockaddr_in& sa) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(sa.sin_port));
}
}  // namespace

RendezvousServer::RendezvousServer(const std::string& addr, int port, int world, std::string secret,
                                   std::string job)
    : world_(world),
      secret_(std::move(secret)),
      job_(std::move(job)),
      slots_(static_cast<size_t>(world)) {
  sockaddr_in sa = wire::resolve_master(addr, port);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  FANOUT_CHECK(listen_fd_ >= 0, "cannot create a socket: ", std::strerror(errno));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    int err = errno;
    ::close(listen_fd_);
    detail::throw_error(detail::str_cat(
        "cannot listen on MASTER_ADDR:MASTER_PORT ", addr, ":", port, ": ",
        err == EADDRINUSE ? "the port is already in use (choose another --master-port)"
                          : std::strerror(err)));
  }
  socklen_t len = sizeof sa;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  thread_ = std::thread([this] { serve(); });
}

RendezvousServer::~RendezvousServer() {
  // When a rank has died, the survivors ask this server who (describe_failure):
  // stay until they are gone, or 5 s, so that they do not blame rank 0.
  // Only registered ranks count: a stranger's open connection holds nothing.
  auto until = Clock::now() + std::chrono::seconds(5);
  while (any_dead_ && ranks_live_ > 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop_ = true;
  thread_.join();
  for (auto& [fd, c] : conns_) ::close(fd);
  ::close(listen_fd_);
}

// --- the poll loop ------------------------------------------------------------

void RendezvousServer::serve() noexcept {
  std::vector<pollfd> fds;
  while (!stop_) {
    try {
      fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
      for (auto& [fd, c] : conns_) {
        auto events = static_cast<short>(POLLIN | (c.out_at < c.out.size() ? POLLOUT : 0));
        fds.push_back({fd, events, 0});
      }
      if (::poll(fds.data(), fds.size(), 100) < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // EINTR, or no memory
        continue;
      }
      if (fds[0].revents & POLLIN) accept_new();
      for (size_t i = 1; i < fds.size(); ++i) {
        auto it = conns_.find(fds[i].fd);
        if (it == conns_.end() || it->second.closing) continue;
        if (fds[i].revents & POLLOUT) write_out(it->first, it->second);
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(it->first, it->second);
      }
      auto now = Clock::now();
      for (auto& [fd, c] : conns_)
        if (c.rank < 0 && !c.closing && now - c.since > kHelloWithin)
          drop(c, "it sent no hello within 10 s");
      reap();
    } catch (...) {
      // Only allocation can throw here; the loop must go on for the real ranks.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void RendezvousServer::accept_new() {
  for (int i = 0; i < 64; ++i) {
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    int fd =
        ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: none left (or an error that the next poll retries)
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn& c = conns_.try_emplace(fd, kHelloLimits).first->second;
    c.peer = peer_of(sa);
    c.since = Clock::now();
    // Too many without a hello: the oldest goes (real ranks say hello at once).
    std::vector<std::pair<Clock::time_point, int>> waiting;
    for (auto& [ofd, oc] : conns_)
      if (oc.rank < 0 && !oc.closing) waiting.emplace_back(oc.since, ofd);
    if (waiting.size() > kMaxUnregistered) {
      auto oldest = std::min_element(waiting.begin(), waiting.end());
      drop(conns_.at(oldest->second), "more than 64 connections without a hello");
    }
  }
}

void RendezvousServer::read_from(int fd, Conn& c) {
  char chunk[kReadChunk];
  ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    c.closing = true;  // the peer closed: a normal end for a rank after its bye
    return;
  }
  c.in.append(chunk, static_cast<size_t>(n));
  wire::Frame f;
  while (!c.closing) {
    auto st = c.in.next(f);
    if (st == wire::FrameReader::Status::kNeedMore) break;
    if (st == wire::FrameReader::Status::kBad) {
      drop(c, (c.rank < 0 ? "before its hello: " : c.bye ? "after its bye: " : "") + c.in.error());
      break;
    }
    try {
      handle(fd, c, f);
    } catch (const std::exception& e) {
      drop(c, std::string("cannot serve it: ") + e.what());
    }
  }
}

// --- requests -----------------------------------------------------------------

void RendezvousServer::handle(int fd, Conn& c, wire::Frame& f) {
  if (c.rank < 0) return hello(fd, c, f);  // the reader lets only 'H' through
  if (f.type != wire::kHello && f.type != wire::kBye) slots_[c.rank].committed = true;
  bool empty_value = f.value.empty();
  switch (f.type) {
    case wire::kHello:
      return drop(c, "a second hello");
    case wire::kSet:
      return set(c, f);
    case wire::kGet:
      if (!empty_value) return drop(c, "a get with a value");
      if (c.waiting.size() >= kMaxWaiting) return drop(c, "too many pending gets");
      c.waiting.push_back(std::move(f.key));
      return flush_gets(fd, c);
    case wire::kDead:
    case wire::kAbsent: {
      if (!f.key.empty() || !empty_value) return drop(c, "a malformed ranks request");
      std::string list;
      for (int r = 0; r < world_; ++r) {
        if (f.type == wire::kDead ? !slots_[r].dead : slots_[r].seen) continue;
        if (!list.empty()) list += ',';
        list += std::to_string(r);
      }
      return send(fd, c, wire::kReply, wire::bytes_of(list));
    }
    case wire::kBye:
      if (!f.key.empty() || !empty_value) return drop(c, "a malformed bye");
      c.bye = true;
      c.in.set_limits(kAfterBye);
      return publish();
  }
}

void RendezvousServer::hello(int fd, Conn& c, const wire::Frame& f) {
  auto value = wire::parse_hello_value(std::string_view(f.value.data(), f.value.size()));
  if (!value) return drop(c, "a malformed hello");
  if (!wire::same_secret(value->secret, secret_)) {
    send(fd, c, wire::kRefused, wire::bytes_of("wrong job secret"));
    return drop(c, value->secret.empty() ? "its hello carries no job secret"
                                         : "its hello carries a wrong job secret");
  }
  auto rank = wire::parse_int(f.key, 0, world_ - 1);
  auto world = wire::parse_int(value->world, 1, 1 << 30);
  std::string refusal;
  if (!rank || !world) {
    return drop(c, "a malformed hello (rank '" + wire::printable(f.key) + "', world size '" +
                       wire::printable(value->world) + "')");
  } else if (value->job != job_) {
    refusal = "it belongs to job '" + wire::printable(value->job) + "', the master to '" +
              wire::printable(job_) + "'";
  } else if (*world != world_) {
    refusal = "WORLD_SIZE is " + std::to_string(*world) + " there but " + std::to_string(world_) +
              " on the master";
  } else if (slots_[*rank].fd >= 0 && !conns_.at(slots_[*rank].fd).closing) {
    refusal = "rank " + std::to_string(*rank) + " is already connected from " +
              conns_.at(slots_[*rank].fd).peer;
  } else if (slots_[*rank].committed) {
    refusal = "rank " + std::to_string(*rank) + " has already been in this job and left it";
  }
  if (!refusal.empty()) {
    // Say why before closing: a real rank refused here prints it.
    send(fd, c, wire::kRefused, wire::bytes_of(refusal.substr(0, wire::kMaxRefusal)));
    return drop(c, "its hello was refused: " + refusal);
  }
  Slot& s = slots_[*rank];
  s.fd = fd;
  s.dead = false;
  s.seen = true;
  c.rank = static_cast<int>(*rank);
  c.in.set_limits(kRankLimits);
  publish();
  send(fd, c, wire::kReply, {});
}

void RendezvousServer::set(Conn& c, wire::Frame& f) {
  auto owner = owner_.find(f.key);
  if (owner != owner_.end() && owner->second != c.rank)
    return drop(c, "rank " + std::to_string(c.rank) + " set the key '" + wire::printable(f.key) +
                       "' of rank " + std::to_string(owner->second));
  auto old = store_.find(f.key);
  size_t old_bytes = old == store_.end() ? 0 : old->first.size() + old->second.size();
  size_t new_bytes = f.key.size() + f.value.size();  // each bounded by the reader: no wrap
  if (store_bytes_ - old_bytes + new_bytes > wire::kMaxStoreBytes)
    return drop(c, "the store would exceed 256 MiB");
  store_bytes_ = store_bytes_ - old_bytes + new_bytes;
  owner_[f.key] = c.rank;
  store_[f.key] = std::move(f.value);
  for (auto& [ofd, oc] : conns_)
    if (oc.rank >= 0 && !oc.closing) flush_gets(ofd, oc);
}

// Answers the connection's pending gets, in order, as far as the keys exist.
void RendezvousServer::flush_gets(int fd, Conn& c) {
  while (!c.closing && !c.waiting.empty()) {
    auto it = store_.find(c.waiting.front());
    if (it == store_.end()) return;
    c.waiting.pop_front();
    send(fd, c, wire::kReply, it->second);
  }
}

// --- output and closing -----------------------------------------------------------

void RendezvousServer::send(int fd, Conn& c, char type, const std::vector<char>& value) {
  if (c.closing) return;
  if (c.out.size() - c.out_at + value.size() > kMaxUnsent)
    return drop(c, "it does not read its replies");
  auto m = wire::frame_encode(type, "", value);
  c.out.insert(c.out.end(), m.begin(), m.end());
  write_out(fd, c);
}

void RendezvousServer::write_out(int fd, Conn& c) {
  while (c.out_at < c.out.size()) {
    ssize_t w =
        ::send(fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c.out_at += static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT resumes it
      c.closing = true;                                                // the peer is gone
      return;
    }
  }
  c.out.clear();
  c.out_at = 0;
}

void RendezvousServer::drop(Conn& c, std::string why) {
  if (c.closing) return;
  c.closing = true;
  c.why = std::move(why);
}

void RendezvousServer::reap() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = it->second;
    if (!c.closing) {
      ++it;
      continue;
    }
    if (!c.why.empty()) warn(c.peer, c.why);
    if (c.rank >= 0 && slots_[c.rank].fd == it->first) {
      slots_[c.rank].fd = -1;
      // A registered rank gone without its bye has died (or was dropped for
      // breaking the protocol: it is cut off all the same).
      if (!c.bye) slots_[c.rank].dead = true;
    }
    ::close(it->first);
    it = conns_.erase(it);
  }
  publish();
}

void RendezvousServer::publish() {
  int live = 0;
  for (auto& [fd, c] : conns_) live += (c.rank >= 0 && !c.bye && !c.closing) ? 1 : 0;
  ranks_live_ = live;
  any_dead_ = std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.dead; });
}

void RendezvousServer::warn(const std::string& peer, const std::string& why) {
  // Bounded: a flood of strangers must not flood rank 0's stderr too.
  if (warnings_ > kMaxWarnings) return;
  if (warnings_++ == kMaxWarnings) {
    std::fprintf(stderr, "fanout: rendezvous: warning: more dropped connections not reported\n");
    return;
  }
  std::fprintf(stderr, "fanout: rendezvous: warning: dropped a connection from %s: %s\n",
               peer.c_str(), wire::printable(why, 300).c_str());
}

}  // namespace fanout::distributed
