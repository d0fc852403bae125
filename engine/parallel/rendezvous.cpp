#include "engine/parallel/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "engine/core/check.h"

namespace fanout::parallel {

// Wire format, both ways: [type: 1 byte][key length: u32][key][value length: u32][value].
// Requests: 'H' hello (key = rank), 'S' set, 'G' get (answered once the key exists),
// 'D' dead ranks (answered at once), 'B' bye. Replies reuse the format with type 'R'.
namespace {

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<size_t>(w);
  }
  return true;
}

std::vector<char> encode(char type, const std::string& key, const std::vector<char>& value) {
  std::vector<char> m(1 + 4 + key.size() + 4 + value.size());
  uint32_t kl = htonl(static_cast<uint32_t>(key.size())),
           vl = htonl(static_cast<uint32_t>(value.size()));
  m[0] = type;
  std::memcpy(&m[1], &kl, 4);
  std::memcpy(&m[5], key.data(), key.size());
  std::memcpy(&m[5 + key.size()], &vl, 4);
  if (!value.empty()) std::memcpy(&m[9 + key.size()], value.data(), value.size());
  return m;
}

// Parses one message from the front of buf; false if incomplete.
bool decode(std::vector<char>& buf, char& type, std::string& key, std::vector<char>& value) {
  if (buf.size() < 5) return false;
  uint32_t kl;
  std::memcpy(&kl, &buf[1], 4);
  kl = ntohl(kl);
  if (buf.size() < 9 + kl) return false;
  uint32_t vl;
  std::memcpy(&vl, &buf[5 + kl], 4);
  vl = ntohl(vl);
  if (buf.size() < 9 + kl + vl) return false;
  type = buf[0];
  key.assign(&buf[5], kl);
  value.assign(buf.begin() + 9 + kl, buf.begin() + 9 + kl + vl);
  buf.erase(buf.begin(), buf.begin() + 9 + kl + vl);
  return true;
}

sockaddr_in resolve(const std::string& addr, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(addr.c_str(), nullptr, &hints, &res);
  FANOUT_CHECK(rc == 0 && res != nullptr, "cannot resolve MASTER_ADDR '", addr,
               "': ", gai_strerror(rc));
  sockaddr_in sa = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  freeaddrinfo(res);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return sa;
}

}  // namespace

// --- the server (rank 0) ----------------------------------------------------

class RendezvousServer {
 public:
  RendezvousServer(const std::string& addr, int port) {
    sockaddr_in sa = resolve(addr, port);
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    FANOUT_CHECK(listen_fd_ >= 0, "cannot create a socket: ", std::strerror(errno));
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      int err = errno;
      ::close(listen_fd_);
      detail::throw_error(detail::str_cat(
          "cannot listen on MASTER_ADDR:MASTER_PORT ", addr, ":", port, ": ",
          err == EADDRINUSE ? "the port is already in use (choose another --master-port)"
                            : std::strerror(err)));
    }
    FANOUT_CHECK(::listen(listen_fd_, 128) == 0, "cannot listen on ", addr, ":", port, ": ",
                 std::strerror(errno));
    thread_ = std::thread([this] { serve(); });
  }
  ~RendezvousServer() {
    // When a rank has died, the survivors ask this server who (describe_failure):
    // stay until they are gone, or 5 s, so that they do not blame rank 0.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (any_dead_ && clients_live_ > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop_ = true;
    thread_.join();
    for (auto& [fd, c] : clients_) ::close(fd);
    ::close(listen_fd_);
  }

 private:
  struct Client {
    int rank = -1;
    bool bye = false;
    std::vector<char> buf;
    std::vector<std::string> waiting;  // keys of pending gets, in order
  };

  void reply(int fd, const std::vector<char>& value) {
    auto m = encode('R', "", value);
    write_all(fd, m.data(), m.size());
  }

  void handle(int fd, Client& c, char type, const std::string& key, std::vector<char> value) {
    switch (type) {
      case 'H':
        c.rank = std::stoi(key);
        break;
      case 'S':
        store_[key] = std::move(value);
        for (auto& [ofd, oc] : clients_) flush(ofd, oc);
        break;
      case 'G':
        c.waiting.push_back(key);
        flush(fd, c);
        break;
      case 'D': {
        std::string list;
        for (int r : dead_) list += (list.empty() ? "" : ",") + std::to_string(r);
        reply(fd, std::vector<char>(list.begin(), list.end()));
        break;
      }
      case 'B':
        c.bye = true;
        break;
    }
  }

  // Answers the client's pending gets, in order, as far as the keys exist.
  void flush(int fd, Client& c) {
    while (!c.waiting.empty() && store_.count(c.waiting.front())) {
      reply(fd, store_[c.waiting.front()]);
      c.waiting.erase(c.waiting.begin());
    }
  }

  void serve() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (auto& [fd, c] : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd >= 0) {
          clients_[fd] = Client{};
          ++clients_live_;
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int fd = fds[i].fd;
        Client& c = clients_[fd];
        char tmp[4096];
        ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
        if (n <= 0) {
          if (!c.bye && c.rank >= 0) {
            dead_.insert(c.rank);
            any_dead_ = true;
          }
          ::close(fd);
          clients_.erase(fd);
          --clients_live_;
          continue;
        }
        c.buf.insert(c.buf.end(), tmp, tmp + n);
        char type;
        std::string key;
        std::vector<char> value;
        while (decode(c.buf, type, key, value)) handle(fd, c, type, key, std::move(value));
      }
    }
  }

  int listen_fd_ = -1;
  std::atomic<bool> stop_{false}, any_dead_{false};
  std::atomic<int> clients_live_{0};
  std::thread thread_;
  std::map<int, Client> clients_;
  std::map<std::string, std::vector<char>> store_;
  std::set<int> dead_;
};

// --- the client (every rank) ------------------------------------------------

Rendezvous::Rendezvous(const std::string& addr, int port, int rank, int world,
                       std::chrono::milliseconds timeout)
    : rank_(rank), world_(world), timeout_(timeout) {
  FANOUT_CHECK(world > 0 && rank >= 0 && rank < world, "RANK ", rank, " does not fit WORLD_SIZE ",
               world);
  FANOUT_CHECK(port > 0 && port < 65536, "MASTER_PORT ", port, " is not a port number");
  if (rank == 0) server_ = std::make_unique<RendezvousServer>(addr, port);
  sockaddr_in sa = resolve(addr, port);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    FANOUT_CHECK(fd_ >= 0, "cannot create a socket: ", std::strerror(errno));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) break;
    ::close(fd_);
    fd_ = -1;
    FANOUT_CHECK(std::chrono::steady_clock::now() < deadline, "rank ", rank,
                 ": cannot reach the master at ", addr, ":", port, " within ",
                 timeout.count() / 1000.0, " s (is rank 0 running?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  send_request('H', std::to_string(rank), {});
}

Rendezvous::~Rendezvous() {
  if (fd_ >= 0) {
    try {
      send_request('B', "", {});
    } catch (...) {
    }
    ::close(fd_);
  }
  server_.reset();
}

void Rendezvous::send_request(char type, const std::string& key, const std::vector<char>& value) {
  auto m = encode(type, key, value);
  FANOUT_CHECK(write_all(fd_, m.data(), m.size()), "rank ", rank_,
               ": lost the connection to the master (rank 0)");
}

std::vector<char> Rendezvous::read_reply(std::chrono::milliseconds timeout) {
  std::vector<char> buf;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    char type;
    std::string key;
    std::vector<char> value;
    if (decode(buf, type, key, value)) return value;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    FANOUT_CHECK(left.count() > 0, "rank ", rank_, ": no answer from the master within ",
                 timeout.count() / 1000.0, " s");
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    char tmp[4096];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    FANOUT_CHECK(n > 0, "rank ", rank_, ": the master (rank 0) closed the connection");
    buf.insert(buf.end(), tmp, tmp + n);
  }
}

void Rendezvous::set(const std::string& key, const std::vector<char>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  send_request('S', key, value);
}

std::vector<char> Rendezvous::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  send_request('G', key, {});
  return read_reply(timeout_);
}

std::vector<int> Rendezvous::dead_ranks() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    send_request('D', "", {});
    std::vector<char> v = read_reply(std::chrono::milliseconds(2000));
    std::vector<int> out;
    std::string s(v.begin(), v.end());
    size_t at = 0;
    while (at < s.size()) {
      size_t comma = s.find(',', at);
      out.push_back(std::stoi(s.substr(at, comma - at)));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    return out;
  } catch (...) {
    return {0};  // the master itself is unreachable
  }
}

std::string Rendezvous::describe_failure() {
  // A peer's collective can fail before the server has seen the dead rank's
  // connection drop: give it a moment.
  std::vector<int> dead = dead_ranks();
  for (int i = 0; i < 20 && dead.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    dead = dead_ranks();
  }
  if (dead.empty()) return "no rank has died";
  if (dead == std::vector<int>{0} && rank_ != 0) return "the master (rank 0) died";
  std::string list;
  for (int r : dead) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return (dead.size() == 1 ? "rank " : "ranks ") + list + (dead.size() == 1 ? " died" : " died");
}

}  // namespace fanout::parallel
