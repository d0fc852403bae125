// The rendezvous framing (engine/distributed/rendezvous_wire.h) on its own: lengths
// that would wrap or exceed the limits are refused as soon as their header
// bytes arrive, whatever way the bytes are split; the reader never holds more
// than one frame; ranks parse strictly. And the client's side: a "master" that
// answers with such frames makes a rank fail with one clear error, quickly.

#include <doctest/doctest.h>

#include <random>

#include "engine/distributed/rendezvous_wire.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using namespace fanout::distributed;
using namespace fanout::test::rdzv;
using Status = wire::FrameReader::Status;

namespace {
constexpr wire::Limits kRank{"HSGDB", wire::kMaxKey, wire::kMaxValue};

// Feeds `bytes` to a reader `split` bytes at a time; the statuses of next().
std::vector<Status> feed(wire::FrameReader& r, const std::string& bytes, size_t split,
                         std::vector<wire::Frame>* frames = nullptr) {
  std::vector<Status> seen;
  for (size_t at = 0; at < bytes.size(); at += split) {
    r.append(bytes.data() + at, std::min(split, bytes.size() - at));
    wire::Frame f;
    Status st;
    while ((st = r.next(f)) == Status::kFrame)
      if (frames) frames->push_back(f);
    seen.push_back(st);
    if (st == Status::kBad) break;
  }
  return seen;
}
}  // namespace

TEST_CASE("rendezvous wire: frames round-trip whatever way the bytes are split") {
  std::string bytes = frame('S', "key/0", "value") + frame('G', "key/0") + frame('D', "") +
                      frame('S', std::string(wire::kMaxKey, 'k'), std::string(70000, 'v'));
  for (size_t split : {size_t{1}, size_t{3}, size_t{4096}, bytes.size()}) {
    CAPTURE(split);
    wire::FrameReader r(kRank);
    std::vector<wire::Frame> frames;
    auto seen = feed(r, bytes, split, &frames);
    CHECK(seen.back() == Status::kNeedMore);
    REQUIRE(frames.size() == 4);
    CHECK(frames[0].type == 'S');
    CHECK(frames[0].key == "key/0");
    CHECK(std::string(frames[0].value.begin(), frames[0].value.end()) == "value");
    CHECK(frames[1].type == 'G');
    CHECK(frames[2].type == 'D');
    CHECK(frames[3].key.size() == wire::kMaxKey);
    CHECK(frames[3].value.size() == 70000);
    CHECK(r.buffered() == 0);
  }
  // frame_encode writes what the reader reads.
  wire::FrameReader r(kRank);
  auto m = wire::frame_encode('S', "k", {'a', 'b'});
  CHECK(std::string(m.begin(), m.end()) == frame('S', "k", "ab"));
}

TEST_CASE("rendezvous wire: wrapping and oversized lengths are refused at their header") {
  struct Case {
    std::string bytes, why;
  };
  std::vector<Case> cases = {
      // 9 + key length wrapped in the old decoder (SIGSEGV).
      {std::string("S") + u32_be(0xFFFFFFF8u), "a key of 4294967288 bytes (at most 4096)"},
      {std::string("S") + u32_be(0xFFFFFFFFu), "a key of 4294967295 bytes"},
      {std::string("S") + u32_be(wire::kMaxKey + 1), "a key of 4097 bytes"},
      {std::string("S") + u32_be(1) + "k" + u32_be(0xFFFFFFFFu), "a value of 4294967295 bytes"},
      {std::string("S") + u32_be(1) + "k" + u32_be(0xFFFFFFF7u), "a value of 4294967287 bytes"},
      {std::string("S") + u32_be(0) + u32_be(wire::kMaxValue + 1), "a value of 67108865 bytes"},
      {"Z", "unexpected message type 'Z'"},
      {std::string(1, '\0'), "unexpected message type 0x00"},
      {std::string(1, '\xff'), "unexpected message type 0xff"},
  };
  for (const auto& c : cases) {
    for (size_t split : {size_t{1}, c.bytes.size()}) {
      CAPTURE(c.why);
      CAPTURE(split);
      wire::FrameReader r(kRank);
      auto seen = feed(r, c.bytes, split);
      // Refused at the last header byte: no payload is waited for.
      REQUIRE(seen.back() == Status::kBad);
      CHECK(seen.size() == (c.bytes.size() + split - 1) / split);
      CHECK(r.error().find(c.why) != std::string::npos);
      CHECK(r.buffered() == 0);
      wire::Frame f;
      r.append("H", 1);
      CHECK(r.next(f) == Status::kBad);  // framing is lost for good
    }
  }
}

TEST_CASE("rendezvous wire: limits change between frames, as a connection's state does") {
  wire::FrameReader r({"H", wire::kMaxHelloField, wire::kMaxHelloField});
  std::string bytes = frame('H', "1", "3") + frame('S', "key", "v");
  r.append(bytes.data(), bytes.size());
  wire::Frame f;
  REQUIRE(r.next(f) == Status::kFrame);
  CHECK(f.type == 'H');
  r.set_limits(kRank);
  REQUIRE(r.next(f) == Status::kFrame);
  CHECK(f.type == 'S');
  // Before a hello, a 33-byte key is already too long.
  wire::FrameReader hello({"H", wire::kMaxHelloField, wire::kMaxHelloField});
  std::string long_key = frame('H', std::string(33, '1'), "3");
  hello.append(long_key.data(), long_key.size());
  CHECK(hello.next(f) == Status::kBad);
}

TEST_CASE("rendezvous wire: random bytes never crash the reader and stay bounded") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::string junk(1 + rng() % 200, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (trial % 2) junk[0] = "HSGDB"[rng() % 5];  // get past the type byte
    wire::FrameReader r(kRank);
    feed(r, junk, 1 + rng() % 16);
    CHECK(r.buffered() <= junk.size());
  }
}

TEST_CASE("rendezvous wire: integers parse strictly") {
  CHECK(wire::parse_int("0", 0, 2) == 0);
  CHECK(wire::parse_int("2", 0, 2) == 2);
  for (std::string_view bad : {"", "3", "-1", "+1", " 1", "1 ", "1x", "0x1", "abc",
                               "99999999999999999999", "9223372036854775808"}) {
    CAPTURE(bad);
    CHECK_FALSE(wire::parse_int(bad, 0, 2).has_value());
  }
  CHECK(wire::parse_int("9223372036854775807", 0, INT64_MAX) == INT64_MAX);
  CHECK(wire::printable(std::string("a\nb\0c", 5)) == "a?b?c");
}

// --- the client's side ---------------------------------------------------------

namespace {
// A rank 1 of 2 against `master`; the error it fails with, and how long it took.
std::string rank1_error(FakeMaster& master, double& seconds) {
  auto t0 = std::chrono::steady_clock::now();
  std::string e = test::error_of([&] {
    distributed::Rendezvous r("127.0.0.1", master.port(), 1, 2, std::chrono::milliseconds(2000));
  });
  seconds = seconds_since(t0);
  return e;
}
}  // namespace

TEST_CASE("rendezvous client: a master answering its hello with a bad frame is refused") {
  for (const std::string& answer : {std::string("R") + u32_be(0xFFFFFFF8u) + std::string(8, 'x'),
                                    std::string("R") + u32_be(0) + u32_be(0x7FFFFFFFu),
                                    std::string("HTTP/1.1 400 Bad Request\r\n\r\n")}) {
    FakeMaster master([answer](int fd) {
      drain(fd, 1000);
      send_all(fd, answer);
    });
    double seconds = 0;
    std::string e = rank1_error(master, seconds);
    CAPTURE(answer);
    CHECK(e.find("rank 1: what answers at 127.0.0.1:") == 0);
    CHECK(e.find("is not a fanout master") != std::string::npos);
    CHECK(seconds < 1.5);  // at once, not after the timeout
  }
}

TEST_CASE("rendezvous client: a reply over the limits fails the request, not the process") {
  FakeMaster master([](int fd) {
    drain(fd, 1000);  // the hello
    send_all(fd, ack());
    drain(fd, 1000);  // the get
    send_all(fd, std::string("R") + u32_be(0) + u32_be(0xFFFFFFFFu));
  });
  distributed::Rendezvous r("127.0.0.1", master.port(), 1, 2, std::chrono::milliseconds(2000));
  std::string e = test::error_of([&] { r.get("key/0"); });
  CHECK(e.find("rank 1: the master sent a malformed reply (a value of 4294967295 bytes") == 0);
}

TEST_CASE("rendezvous client: a dead-ranks reply that is not a list of ranks means no master") {
  for (std::string list : {"1,abc", "99999999999999999999", "5", "1,", ",1"}) {
    FakeMaster master([list](int fd) {
      drain(fd, 1000);
      send_all(fd, ack());
      drain(fd, 1000);
      send_all(fd, frame('R', "", list));
    });
    distributed::Rendezvous r("127.0.0.1", master.port(), 1, 2, std::chrono::milliseconds(2000));
    CAPTURE(list);
    CHECK(r.dead_ranks() == std::vector<int>{0});
  }
}
