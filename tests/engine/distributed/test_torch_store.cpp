// TorchStore (engine/distributed/torch_store.h) against a real torch TCPStore
// served by /usr/bin/python3 (skipped when it cannot import torch): the
// protocol is detected, keys cross both ways, a wait for a key nobody sets ends
// at the timeout; and against things that are not a store, one error line
// within the timeout.

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "engine/core/check.h"
#include "engine/distributed/torch_store.h"

using namespace fanout;
using namespace fanout::distributed;

namespace {
using Clock = std::chrono::steady_clock;

// python3 serving a TCPStore: it sets "from-python", prints its port, waits for
// "from-fanout" and prints that key's value. `timeout 60` bounds it.
constexpr const char* kServer = R"(timeout 60 /usr/bin/python3 -c '
import sys, torch.distributed as d
from datetime import timedelta
s = d.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30), wait_for_workers=False)
s.set("from-python", "hello")
print(s.port, flush=True)
s.wait(["from-fanout"])
print(s.get("from-fanout").decode(), flush=True)
' 2>&1)";

std::string read_line(FILE* f) {
  char buf[256] = "";
  if (std::fgets(buf, sizeof buf, f) == nullptr) return "";
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("torch store client sets, waits for and gets keys of torch's own TCPStore") {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: /usr/bin/python3 cannot import torch");
    return;
  }
  FILE* py = ::popen(kServer, "r");
  REQUIRE(py != nullptr);
  std::string port = read_line(py);
  INFO("python said: " << port);
  int p = std::atoi(port.c_str());
  if (p <= 0) ::pclose(py);
  REQUIRE(p > 0);
  FILE* v = ::popen("/usr/bin/python3 -c 'import torch; print(torch.__version__[0])'", "r");
  std::string major = read_line(v);
  ::pclose(v);
  std::string echoed;
  {
    TorchStore store("127.0.0.1", p, std::chrono::milliseconds(10000));
    // torch 1.x answers 1.x's GETNUMKEYS at once; torch >= 2.0 needs the other protocol.
    CHECK(store.protocol() == (major == "1" ? 1 : 2));
    CHECK(store.get("from-python") == "hello");
    // A key nobody sets: the wait ends at the timeout with one line (before
    // "from-fanout", which ends the server).
    TorchStore quick("127.0.0.1", p, std::chrono::milliseconds(500));
    auto t0 = Clock::now();
    std::string msg = error_of([&] { quick.get("never-set"); });
    INFO("error: " << msg);
    CHECK(msg.find("did not get 'never-set' within 0.5 s") != std::string::npos);
    CHECK(Clock::now() - t0 < std::chrono::seconds(3));
    int64_t before = store.num_keys();
    CHECK(before >= 1);
    store.set("extra", "1");
    CHECK(store.num_keys() == before + 1);
    store.set("from-fanout", "world");  // the server's last step: it exits after reading it
    MESSAGE("TCPStore protocol " << store.protocol());
  }
  echoed = read_line(py);
  ::pclose(py);
  CHECK(echoed == "world");
}

TEST_CASE("torch store client: nothing listening, or a silent listener, is one error in time") {
  // A port that was free a moment ago: connect is refused until the timeout.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  int port = ntohs(sa.sin_port);
  auto t0 = Clock::now();
  std::string msg =
      error_of([&] { TorchStore("127.0.0.1", port, std::chrono::milliseconds(300)); });
  CHECK(msg ==
        "cannot reach torchrun's store at 127.0.0.1:" + std::to_string(port) + " within 0.3 s");
  // Listening but never answering (the backlog accepts): the probe finds no 1.x
  // store, and a get waits for nothing until the timeout.
  REQUIRE(::listen(fd, 16) == 0);
  TorchStore silent("127.0.0.1", port, std::chrono::milliseconds(300));
  CHECK(silent.protocol() == 2);
  msg = error_of([&] { silent.get("k"); });
  CHECK(msg.find("did not get 'k' within 0.3 s") != std::string::npos);
  CHECK(Clock::now() - t0 < std::chrono::seconds(5));
  ::close(fd);
}
