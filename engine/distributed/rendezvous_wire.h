#pragma once
// The rendezvous wire format, shared by the server (rank 0) and every client:
// [type: 1 byte][key length: u32 BE][key][value length: u32 BE][value].
// Anything may connect to the master's port, so decoding is bounded and total:
// a FrameReader checks the type and each length as soon as its bytes arrive,
// never computes a size that can wrap, never buffers more than one bounded
// frame, and reports a bad frame as a reason string instead of throwing.

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fanout::distributed::wire {

// Requests: 'H' hello (key = rank, value = hello_value(): world size, job and
// secret; answered 'R' or 'E'),
// 'S' set, 'G' get (answered once the key exists), 'D' dead ranks and 'A' ranks
// that never said hello (both answered at once), 'B' bye. Replies: 'R' (value = the answer), 'E'
// (value = why the master refused this connection; it closes it next).
constexpr char kHello = 'H', kSet = 'S', kGet = 'G', kDead = 'D', kAbsent = 'A', kBye = 'B';
constexpr char kReply = 'R', kRefused = 'E';

// Gloo's addresses (about 100 bytes per peer) and NCCL's 128-byte id are far below these.
constexpr size_t kMaxKey = 4096;
constexpr size_t kMaxValue = size_t{64} << 20;
// All keys and values the master's store holds together.
constexpr size_t kMaxStoreBytes = size_t{256} << 20;
// A hello's key is a decimal int and its value three short lines; a refusal is
// one short sentence.
constexpr size_t kMaxHelloField = 32;
constexpr size_t kMaxHelloValue = 1024;
constexpr size_t kMaxSecret = 256, kMaxJob = 256;
constexpr size_t kMaxRefusal = 1024;

struct Frame {
  char type = 0;
  std::string key;
  std::vector<char> value;
};

// What a reader accepts next: the frame types and the largest key and value.
struct Limits {
  std::string_view types;
  size_t max_key = 0, max_value = 0;
};

inline std::vector<char> bytes_of(std::string_view s) {
  return {s.begin(), s.end()};
}

std::vector<char> frame_encode(char type, std::string_view key, const std::vector<char>& value);

class FrameReader {
 public:
  enum class Status { kFrame, kNeedMore, kBad };

  explicit FrameReader(Limits limits) : limits_(limits) {}
  // The limits apply from the next frame on (a connection's state changes what it may send).
  void set_limits(Limits limits) { limits_ = limits; }

  // Appends received bytes; the caller then calls next() until it stops returning kFrame.
  void append(const char* data, size_t n) { buf_.insert(buf_.end(), data, data + n); }
  // The next complete frame into `out`; kBad with error() once the stream is
  // malformed (the connection must then be dropped: framing is lost).
  Status next(Frame& out);
  const std::string& error() const { return error_; }
  // Bytes held for a frame not yet complete.
  size_t buffered() const { return buf_.size() - at_; }

 private:
  Status bad(std::string why);

  Limits limits_;
  std::vector<char> buf_;
  size_t at_ = 0;  // start of the first unparsed byte in buf_
  std::string error_;
};

// A hello's value: "<world>\n<job>\n<secret>". parse_hello_value splits one;
// nullopt unless it has exactly three fields within the limits.
struct HelloValue {
  std::string world, job, secret;
};
std::vector<char> hello_value(int world, std::string_view job, std::string_view secret);
std::optional<HelloValue> parse_hello_value(std::string_view value);
// Equal strings, in time that depends on the lengths only (a secret's bytes are not probed).
bool same_secret(std::string_view a, std::string_view b);

// Whole string, decimal, no sign or spaces, value in [lo, hi]; nullopt otherwise.
std::optional<int64_t> parse_int(std::string_view s, int64_t lo, int64_t hi);

// MASTER_ADDR:MASTER_PORT as an IPv4 socket address; fanout::Error if it does not resolve.
sockaddr_in resolve_master(const std::string& addr, int port);

// Text from the network made safe for one line of stderr (no control bytes, bounded).
std::string printable(std::string_view s, size_t max_len = 200);

}  // namespace fanout::distributed::wire
