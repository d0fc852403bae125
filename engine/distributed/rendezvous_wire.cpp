#include "engine/distributed/rendezvous_wire.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <charconv>
#include <cstdio>
#include <cstring>

#include "engine/core/check.h"

namespace fanout::distributed::wire {

namespace {
uint32_t read_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}

std::string type_name(char type) {
  if (type >= 0x21 && type <= 0x7e) return std::string("'") + type + "'";
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(type));
  return hex;
}
}  // namespace

std::vector<char> frame_encode(char type, std::string_view key, const std::vector<char>& value) {
  // Only this process's own keys and values are encoded; the limits keep them honest.
  uint32_t kl = htonl(static_cast<uint32_t>(key.size())),
           vl = htonl(static_cast<uint32_t>(value.size()));
  std::vector<char> m;
  m.reserve(1 + 4 + key.size() + 4 + value.size());
  m.push_back(type);
  m.insert(m.end(), reinterpret_cast<const char*>(&kl), reinterpret_cast<const char*>(&kl) + 4);
  m.insert(m.end(), key.begin(), key.end());
  m.insert(m.end(), reinterpret_cast<const char*>(&vl), reinterpret_cast<const char*>(&vl) + 4);
  m.insert(m.end(), value.begin(), value.end());
  return m;
}

FrameReader::Status FrameReader::bad(std::string why) {
  error_ = std::move(why);
  buf_.clear();
  at_ = 0;
  return Status::kBad;
}

FrameReader::Status FrameReader::next(Frame& out) {
  if (!error_.empty()) return Status::kBad;
  // Each field is checked as soon as its bytes are here, so a bad header is
  // refused before any of its claimed payload is waited for or buffered.
  size_t have = buf_.size() - at_;
  const char* p = buf_.data() + at_;
  if (have >= 1 && limits_.types.find(p[0]) == std::string_view::npos)
    return bad("unexpected message type " + type_name(p[0]));
  size_t need = 1 + 4;
  if (have >= need) {
    uint32_t kl = read_u32(p + 1);
    if (kl > limits_.max_key)
      return bad("a key of " + std::to_string(kl) + " bytes (at most " +
                 std::to_string(limits_.max_key) + ")");
    need += kl + 4;  // kl <= max_key: no wrap
    if (have >= need) {
      uint32_t vl = read_u32(p + 1 + 4 + kl);
      if (vl > limits_.max_value)
        return bad("a value of " + std::to_string(vl) + " bytes (at most " +
                   std::to_string(limits_.max_value) + ")");
      need += vl;  // vl <= max_value: no wrap
      if (have >= need) {
        out.type = p[0];
        out.key.assign(p + 1 + 4, kl);
        out.value.assign(p + 1 + 4 + kl + 4, p + need);
        at_ += need;
        if (at_ == buf_.size()) buf_.clear(), at_ = 0;
        return Status::kFrame;
      }
    }
  }
  // Incomplete: drop what was consumed so the buffer holds at most one frame.
  if (at_ > 0) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(at_));
    at_ = 0;
  }
  return Status::kNeedMore;
}

std::vector<char> hello_value(int world, std::string_view job, std::string_view secret) {
  return bytes_of(std::to_string(world) + "\n" + std::string(job) + "\n" + std::string(secret));
}

std::optional<HelloValue> parse_hello_value(std::string_view value) {
  size_t a = value.find('\n');
  if (a == std::string_view::npos) return std::nullopt;
  size_t b = value.find('\n', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  HelloValue h{std::string(value.substr(0, a)), std::string(value.substr(a + 1, b - a - 1)),
               std::string(value.substr(b + 1))};
  if (h.world.size() > kMaxHelloField || h.job.size() > kMaxJob || h.secret.size() > kMaxSecret ||
      h.secret.find('\n') != std::string::npos)
    return std::nullopt;
  return h;
}

bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::optional<int64_t> parse_int(std::string_view s, int64_t lo, int64_t hi) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

sockaddr_in resolve_master(const std::string& addr, int port) {
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

std::string printable(std::string_view s, size_t max_len) {
  std::string out;
  for (char c : s.substr(0, max_len)) out += (c >= 0x20 && c <= 0x7e) ? c : '?';
  if (s.size() > max_len) out += "...";
  return out;
}

}  // namespace fanout::distributed::wire
