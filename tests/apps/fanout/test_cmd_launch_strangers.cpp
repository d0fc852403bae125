// A real `fanout launch` job against strangers on its rendezvous port: while two
// ranks train, other connections send a hello without the job's secret, one with
// a wrong secret, garbage, half a frame, or nothing at all (held open). Each is
// dropped with one warning line on rank 0, and the job trains exactly what it
// trains alone. The rendezvous's own cases: tests/engine/distributed/test_rendezvous.cpp.

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "tests/apps/fanout/launch_util.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {

// A connection to 127.0.0.1:port once something listens there (within `seconds`); -1 if not.
int connect_when_listening(int port, double seconds) {
  auto t0 = std::chrono::steady_clock::now();
  while (rdzv::seconds_since(t0) < seconds) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

}  // namespace

TEST_CASE("launch: strangers on the rendezvous port are dropped while the real job trains") {
  TinyRun run;
  const int64_t steps = 12;
  std::string alone = run.dir / "alone", crowded = run.dir / "crowded";
  auto launch = [&](const std::string& out, int port) {
    return concat({"launch", "--nproc-per-node", "2", "--master-port", std::to_string(port), "--"},
                  concat(run.train_args(out, steps), {"--strategy", "ddp", "--devices", "cpu"}));
  };
  FanoutProcess ref(launch(alone, free_port()), {}, run.dir.path, "alone");
  REQUIRE(ref.wait(120));
  INFO("alone: " << ref.err());
  REQUIRE(ref.rc() == 0);

  int port = free_port();
  FanoutProcess job(launch(crowded, port), {}, run.dir.path, "crowded");
  std::vector<int> fds;
  // No secret (the hello of a fanout before job secrets), a wrong one with a
  // plausible rank and world, garbage, half a frame, silence.
  const std::vector<std::string> payloads = {
      rdzv::frame('H', "1", "2"),
      rdzv::hello("1", "2", "0123456789abcdef0123456789abcdef", "fanout-launch"),
      std::string("\x17garbage\xff\x00\x01", 11), std::string("H") + rdzv::u32_be(1) + "1", ""};
  for (const std::string& bytes : payloads) {
    int fd = connect_when_listening(port, 60);
    REQUIRE(fd >= 0);
    if (!bytes.empty()) rdzv::send_all(fd, bytes);
    fds.push_back(fd);
  }
  // The wrong secret is answered with a refusal that says nothing about the job.
  std::string answer = rdzv::drain(fds[1], 2000);
  CHECK(answer == rdzv::frame('E', "", "wrong job secret"));
  REQUIRE(job.wait(120));
  for (int fd : fds) ::close(fd);
  std::string err = job.err();
  INFO("crowded: " << err);
  CHECK(job.rc() == 0);
  auto warnings = lines_with(err, "fanout: rendezvous: warning: dropped a connection from");
  CHECK(warnings.size() >= 3);
  CHECK(lines_with(err, "a malformed hello").size() == 1);
  CHECK(lines_with(err, "its hello carries a wrong job secret").size() == 1);
  CHECK(lines_with(err, "unexpected message type 0x17").size() == 1);
  // The strangers changed nothing: the same losses and the same weights.
  auto a = metrics_losses(alone + "/metrics.jsonl"), b = metrics_losses(crowded + "/metrics.jsonl");
  CHECK(a.size() == static_cast<size_t>(steps));
  CHECK(a == b);
  CHECK(weights_all(alone + "/final") == weights_all(crowded + "/final"));
}
