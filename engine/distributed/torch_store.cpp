#include "engine/distributed/torch_store.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "engine/core/check.h"
#include "engine/distributed/rendezvous_wire.h"

namespace fanout::distributed {

// Note [TCPStore protocol versions]
// Every integer is little-endian; a string or byte vector is a u64 length and
// its bytes; a query is one type byte and its arguments. torch 1.x's types:
// SET=0 (key, value; no reply), COMPARE_SET=1, GET=2 (key; reply: a byte
// vector), ADD=3, CHECK=4, WAIT=5 (u64 count, keys; reply: one byte, 0 =
// STOP_WAITING once all exist), GETNUMKEYS=6 (reply: i64). torch >= 2.0 put
// VALIDATE=0 in front (a client first sends it with the u32 magic 0x3C85F7CE),
// shifting every other type by one. The probe sends 1.x's GETNUMKEYS (6) on a
// throwaway connection: a 1.x server answers 8 bytes at once; a 2.x server
// takes 6 for WAIT and waits for its count (silence) or, under libuv, closes a
// connection that did not validate first (EOF). torch's client puts "/" in
// front of every key it sends (TCPStore::keyPrefix_), so this one does too: a
// key set here is the same key to a Python TCPStore.

namespace {
using Clock = std::chrono::steady_clock;
constexpr uint32_t kValidateMagic = 0x3C85F7CE;
constexpr char kSet = 0, kGet = 2, kWait = 5, kGetNumKeys = 6;  // torch 1.x's numbers
constexpr uint64_t kMaxValue = 1 << 20, kMaxKey = 1 << 16;
constexpr auto kProbeWait = std::chrono::milliseconds(1000);
const std::string kKeyPrefix = "/";

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// A connected socket to `sa`, or -1 once `deadline` has passed.
int connect_until(const sockaddr_in& sa, Clock::time_point deadline) {
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FANOUT_CHECK(fd >= 0, "cannot create a socket: ", std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    ::close(fd);
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool send_all(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 1000) <= 0) {
      if (errno == EINTR) continue;
      return false;
    }
    ssize_t w = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w <= 0) return false;
    at += static_cast<size_t>(w);
  }
  return true;
}

enum class Got { kOk, kClosed, kTimeout };

Got recv_until(int fd, char* out, size_t n, Clock::time_point deadline) {
  size_t at = 0;
  while (at < n) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return Got::kTimeout;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) return Got::kClosed;
    if (ready <= 0) continue;
    ssize_t r = ::recv(fd, out + at, n - at, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Got::kClosed;
    at += static_cast<size_t>(r);
  }
  return Got::kOk;
}
}  // namespace

TorchStore::TorchStore(const std::string& addr, int port, std::chrono::milliseconds timeout)
    : where_(addr + ":" + std::to_string(port)), timeout_(timeout) {
  sockaddr_in sa = wire::resolve_master(addr, port);
  auto deadline = Clock::now() + timeout_;
  auto unreachable = [&] {
    detail::throw_error(detail::str_cat("cannot reach torchrun's store at ", where_, " within ",
                                        timeout_.count() / 1000.0, " s"));
  };
  // The probe, on a connection of its own: a 2.x server may be left expecting more of it.
  int probe = connect_until(sa, deadline);
  if (probe < 0) unreachable();
  char reply[8];
  Got got = send_all(probe, std::string(1, kGetNumKeys))
                ? recv_until(probe, reply, 8, Clock::now() + kProbeWait)
                : Got::kClosed;
  ::close(probe);
  protocol_ = got == Got::kOk ? 1 : 2;
  fd_ = connect_until(sa, deadline);
  if (fd_ < 0) unreachable();
  if (protocol_ == 2) {
    std::string validate(1, 0);
    for (int i = 0; i < 4; ++i) validate += static_cast<char>((kValidateMagic >> (8 * i)) & 0xff);
    send_bytes(validate);
  }
}

TorchStore::~TorchStore() {
  if (fd_ >= 0) ::close(fd_);
}

char TorchStore::query(int v1_type) const {
  return static_cast<char>(protocol_ == 1 ? v1_type : v1_type + 1);
}

void TorchStore::send_bytes(const std::string& bytes) {
  FANOUT_CHECK(send_all(fd_, bytes), "lost the connection to torchrun's store at ", where_);
}

void TorchStore::recv_bytes(char* out, size_t n, Clock::time_point deadline) {
  Got got = recv_until(fd_, out, n, deadline);
  FANOUT_CHECK(got != Got::kTimeout, "no answer from torchrun's store at ", where_, " within ",
               timeout_.count() / 1000.0, " s");
  FANOUT_CHECK(got == Got::kOk, "torchrun's store at ", where_, " closed the connection");
}

void TorchStore::set(const std::string& key, const std::string& value) {
  FANOUT_CHECK(key.size() <= kMaxKey && value.size() <= kMaxValue, "a TCPStore key of ", key.size(),
               " bytes or value of ", value.size(), " bytes is over the limit");
  std::string m(1, query(kSet));
  put_str(m, kKeyPrefix + key);
  put_str(m, value);
  send_bytes(m);
}

void TorchStore::wait(const std::vector<std::string>& keys) {
  std::string m(1, query(kWait));
  put_u64(m, keys.size());
  for (const std::string& k : keys) put_str(m, kKeyPrefix + k);
  send_bytes(m);
  char r = 1;
  Got got = recv_until(fd_, &r, 1, Clock::now() + timeout_);
  std::string names;
  for (const std::string& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
  FANOUT_CHECK(got != Got::kTimeout, "torchrun's store at ", where_, " did not get ", names,
               " within ", timeout_.count() / 1000.0, " s (did rank 0 start?)");
  FANOUT_CHECK(got == Got::kOk, "torchrun's store at ", where_, " closed the connection");
  FANOUT_CHECK(r == 0, "torchrun's store at ", where_, " answered a wait with ",
               static_cast<int>(static_cast<unsigned char>(r)), ", not STOP_WAITING (0)");
}

std::string TorchStore::get(const std::string& key) {
  wait({key});
  std::string m(1, query(kGet));
  put_str(m, kKeyPrefix + key);
  send_bytes(m);
  auto deadline = Clock::now() + timeout_;
  char len[8];
  recv_bytes(len, 8, deadline);
  uint64_t n = get_u64(len);
  FANOUT_CHECK(n <= kMaxValue, "torchrun's store at ", where_, " sent a value of ", n,
               " bytes for '", key, "' (at most ", kMaxValue, " are accepted)");
  std::string value(n, '\0');
  if (n > 0) recv_bytes(value.data(), n, deadline);
  return value;
}

int64_t TorchStore::num_keys() {
  send_bytes(std::string(1, query(kGetNumKeys)));
  char v[8];
  recv_bytes(v, 8, Clock::now() + timeout_);
  return static_cast<int64_t>(get_u64(v));
}

}  // namespace fanout::distributed
