// The rendezvous against strangers on its port, on 127.0.0.1: a real 3-rank job
// (one Rendezvous per rank in this process) keeps working while a raw socket
// sends it wrapping or huge lengths, garbage, bad hellos, requests before a
// hello, half a frame, or claims a rank. After each, every key the ranks set is
// unchanged, no rank is reported dead, and the master printed one warning line.
// A real rank's disconnection is still reported. Client-side bounds and the
// framing itself: test_rendezvous_wire.cpp.

#include <doctest/doctest.h>

#include <random>
#include <tuple>

#include "tests/apps/fanout/cli_runner.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using namespace fanout::test::rdzv;

namespace {

const std::string kWarning = "fanout: rendezvous: warning: dropped a connection from 127.0.0.1:";

// Lines of `text` that contain `phrase`.
int count_lines(const std::string& text, const std::string& phrase) {
  int n = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.compare(at, end - at, "") != 0 &&
        text.substr(at, end - at).find(phrase) != std::string::npos)
      ++n;
    at = end + 1;
  }
  return n;
}

// One stranger sends `bytes` to a 3-rank job: the master closes that
// connection without sending it anything, warns once naming `why`, and the job
// is intact.
void check_dropped(const std::string& bytes, const std::string& why) {
  StderrCapture err;
  Job job(3, 3);
  job.publish();
  Stranger s(job.port);
  s.send(bytes);
  bool closed = false;
  std::string got = s.read_until_closed(2.0, closed);
  CHECK(closed);
  CHECK(got.empty());
  job.check_intact("after");
  std::string text = err.text();
  INFO("stderr: " << text);
  CHECK(count_lines(text, "") == 1);
  CHECK(count_lines(text, kWarning) == 1);
  CHECK(count_lines(text, why) == 1);
}

// Waits until rank `r` of `job` reports exactly `dead`; false after 2 s.
bool wait_dead(Job& job, int r, const std::vector<int>& dead) {
  auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 2) {
    if (job[r].dead_ranks() == dead) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST_CASE("rendezvous: wrapping length fields drop only the stranger's connection") {
  // The first is what crashed the old master (SIGSEGV): 9 + key length wrapped.
  check_dropped(std::string("S") + u32_be(0xFFFFFFF8u) + std::string(12, 'x'),
                "before its hello: unexpected message type 'S'");
  check_dropped(std::string("H") + u32_be(0xFFFFFFF8u) + std::string(12, 'x'),
                "before its hello: a key of 4294967288 bytes (at most 32)");
  check_dropped(std::string("H") + u32_be(1) + "1" + u32_be(0xFFFFFFFFu) + "3",
                "before its hello: a value of 4294967295 bytes (at most 1024)");
}

TEST_CASE("rendezvous: a huge length is refused before its payload arrives") {
  // Nothing follows the header: the master must not wait for 2 GiB.
  check_dropped(std::string("H") + u32_be(0x7FFFFFFFu), "a key of 2147483647 bytes");
}

TEST_CASE("rendezvous: garbage bytes drop only the stranger's connection") {
  std::mt19937 rng(17);
  std::string junk(4096, '\0');
  for (char& c : junk) c = static_cast<char>(rng());
  junk[0] = 'x';
  check_dropped(junk, "unexpected message type 'x'");
}

TEST_CASE("rendezvous: a hello that is not a rank in range is refused") {
  for (const auto& [rank, world] : std::vector<std::pair<std::string, std::string>>{{"abc", "3"},
                                                                                    {"1", "three"},
                                                                                    {" 1", "3"},
                                                                                    {"-1", "3"},
                                                                                    {"+1", "3"},
                                                                                    {"3", "3"},
                                                                                    {"", "3"},
                                                                                    {"1", ""}}) {
    CAPTURE(rank);
    CAPTURE(world);
    check_dropped(hello(rank, world), "a malformed hello");
  }
}

TEST_CASE("rendezvous: a hello without the job's secret is refused, and learns nothing") {
  // An old-style hello (no job, no secret), no secret, a wrong one, one a byte
  // short or long; the secret is checked before the rank, world and job, so the
  // answer never depends on them.
  check_dropped(frame('H', "1", "3"), "a malformed hello");
  for (const auto& [secret, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "its hello carries no job secret"},
           {"guess", "its hello carries a wrong job secret"},
           {kSecret.substr(1), "its hello carries a wrong job secret"},
           {kSecret + "0", "its hello carries a wrong job secret"}}) {
    for (const auto& [rank, world, job] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"1", "3", kJobName}, {"2", "5", "other"}, {"7", "3", kJobName}}) {
      CAPTURE(secret);
      CAPTURE(rank);
      StderrCapture err;
      Job j(3, 3);
      j.publish();
      Stranger s(j.port);
      s.send(hello(rank, world, secret, job));
      bool closed = false;
      std::string got = s.read_until_closed(2.0, closed);
      CHECK(closed);
      CHECK(got == frame('E', "", "wrong job secret"));
      j.check_intact("after");
      std::string text = err.text();
      CHECK(count_lines(text, kWarning) == 1);
      CHECK(count_lines(text, why) == 1);
    }
  }
}

TEST_CASE("rendezvous: an overflowing hello is refused") {
  // std::stoi threw std::out_of_range here, in the server thread: SIGABRT.
  check_dropped(hello("99999999999999999999", "3"), "a malformed hello");
  check_dropped(hello("1", "99999999999999999999"), "a malformed hello");
  check_dropped(hello("9223372036854775808", "3"), "a malformed hello");
}

TEST_CASE("rendezvous: a request before the hello reads and writes nothing") {
  check_dropped(frame('G', "key/0"), "before its hello: unexpected message type 'G'");
  check_dropped(frame('S', "key/0", "evil"), "before its hello: unexpected message type 'S'");
  check_dropped(frame('D', ""), "before its hello: unexpected message type 'D'");
  check_dropped(frame('B', ""), "before its hello: unexpected message type 'B'");
}

TEST_CASE("rendezvous: a hello for a connected rank is refused and that rank keeps working") {
  StderrCapture err;
  Job job(3, 3);
  job.publish();
  Stranger s(job.port);
  s.send(hello("1", "3"));
  bool closed = false;
  std::string got = s.read_until_closed(2.0, closed);
  CHECK(closed);
  // The refusal says why (a real rank refused here prints it), then the master closes.
  REQUIRE(got.size() > 9);
  CHECK(got[0] == 'E');
  CHECK(got.find("rank 1 is already connected from 127.0.0.1:") != std::string::npos);
  s.close();
  job.check_intact("after");
  std::string text = err.text();
  INFO("stderr: " << text);
  CHECK(count_lines(text, "") == 1);
  CHECK(count_lines(text, kWarning) == 1);
  CHECK(count_lines(text, "its hello was refused: rank 1 is already connected") == 1);
}

TEST_CASE("rendezvous: a real rank that is refused says why") {
  StderrCapture err;
  Job job(3, 3);
  std::string dup =
      test::error_of([&] { distributed::Rendezvous again(job_options(job.port, 1, 3)); });
  CHECK(dup.find("rank 1: the master at 127.0.0.1:") != std::string::npos);
  CHECK(dup.find("refused this rank: rank 1 is already connected") != std::string::npos);
  std::string world =
      test::error_of([&] { distributed::Rendezvous other(job_options(job.port, 1, 2)); });
  CHECK(world.find("refused this rank: WORLD_SIZE is 2 there but 3 on the master") !=
        std::string::npos);
  auto stray = job_options(job.port, 1, 3);
  stray.job = "another-job";
  std::string other_job = test::error_of([&] { distributed::Rendezvous other(stray); });
  CHECK(other_job.find("refused this rank: it belongs to job 'another-job', the master to "
                       "'test-job'") != std::string::npos);
  stray = job_options(job.port, 1, 3);
  stray.secret = "not the secret";
  std::string wrong = test::error_of([&] { distributed::Rendezvous other(stray); });
  CHECK(wrong.find("refused this rank: wrong job secret") != std::string::npos);
  job.publish();
  job.check_intact("after");
}

TEST_CASE("rendezvous: half a frame, then silence, neither blocks the job nor holds its end") {
  StderrCapture err;
  auto job = std::make_unique<Job>(3, 2);
  Stranger half(job->port), silent(job->port);
  half.send(std::string("H") + u32_be(1) + "1");  // and never the rest
  job->join(2);                                   // the master still serves while they hang
  job->publish();
  job->check_intact("after");
  auto t0 = std::chrono::steady_clock::now();
  job.reset();  // both strangers still connected
  CHECK(seconds_since(t0) < 1.0);
  bool closed = false;
  half.read_until_closed(1.0, closed);
  CHECK(closed);
  CHECK(err.text().empty());  // an ordinary end: nobody was dropped for misbehaving
}

TEST_CASE("rendezvous: a second hello on one connection drops it") {
  StderrCapture err;
  Job job(3, 2);
  Stranger s(job.port);
  s.send(hello("2", "3"));
  CHECK(s.read_n(9) == ack());
  s.send(hello("2", "3"));
  bool closed = false;
  s.read_until_closed(2.0, closed);
  CHECK(closed);
  CHECK(count_lines(err.text(), "a second hello") == 1);
  // Rank 2's place was held by the stranger when it was cut off; the real rank 2
  // takes it back (the job had not formed yet) and nobody stays blamed.
  REQUIRE(wait_dead(job, 0, {2}));
  job.join(2);
  job.publish();
  job.check_intact("after");
}

TEST_CASE("rendezvous: a fake hello for a rank not yet connected, then a disconnect, blames none") {
  StderrCapture err;
  Job job(3, 2);
  job[0].set("key/0", {'v'});
  {
    Stranger s(job.port);
    s.send(hello("2", "3"));
    CHECK(s.read_n(9) == ack());
  }
  // The master took the stranger for rank 2 and saw it vanish ...
  REQUIRE(wait_dead(job, 0, {2}));
  // ... until the real rank 2 joins: then the job is whole and nobody is dead.
  job.join(2);
  job.publish();
  job.check_intact("after");
  CHECK(err.text().empty());
}

TEST_CASE("rendezvous: a flood of silent connections drops the oldest and the job goes on") {
  StderrCapture err;
  Job job(3, 2);
  std::vector<std::unique_ptr<Stranger>> flood;
  for (int i = 0; i < 70; ++i) {
    flood.push_back(std::make_unique<Stranger>(job.port));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a clear order of arrival
  }
  bool closed = false;
  flood.front()->read_until_closed(2.0, closed);
  CHECK(closed);  // the oldest went first
  flood.back()->read_until_closed(0.1, closed);
  CHECK_FALSE(closed);
  job.join(2);
  job.publish();
  job.check_intact("after");
  std::string text = err.text();
  INFO("stderr: " << text);
  CHECK(count_lines(text, "more than 64 connections without a hello") >= 6);
  CHECK(count_lines(text, "") == count_lines(text, kWarning));
}

TEST_CASE("rendezvous: a rank cannot overwrite another rank's key, only its own") {
  StderrCapture err;
  Job job(3, 3);
  job.publish();
  job[0].set("key/0", {'v', '2'});  // its own key: allowed
  CHECK(job[1].get("key/0") == std::vector<char>{'v', '2'});
  job[0].set("key/0", {'v', 'a', 'l', 'u', 'e', ' ', 'o', 'f', ' ', 'r', 'a', 'n', 'k', ' ', '0'});
  job[1].set("key/0", {'e', 'v', 'i', 'l'});  // rank 0's key: rank 1 is cut off
  // (The set has no answer: its next request finds the connection gone.)
  CHECK(test::error_of([&] { job[1].get("key/1"); }).find("rank 1: ") == 0);
  for (int r : {0, 2}) {
    CHECK(job[r].get("key/0") == std::vector<char>{'v', 'a', 'l', 'u', 'e', ' ', 'o', 'f', ' ', 'r',
                                                   'a', 'n', 'k', ' ', '0'});
  }
  CHECK(count_lines(err.text(), "rank 1 set the key 'key/0' of rank 0") == 1);
}

TEST_CASE("rendezvous: a registered rank's disconnection without a bye is reported") {
  SUBCASE("without a bye: dead") {
    Job job(3, 2);
    Stranger rank2(job.port);  // on the wire, exactly what a real rank 2 does
    rank2.send(hello("2", "3") + frame('S', "key/2", "x"));
    CHECK(rank2.read_n(9) == ack());
    CHECK(job[0].get("key/2") == std::vector<char>{'x'});
    rank2.close();  // killed
    REQUIRE(wait_dead(job, 0, {2}));
    CHECK(job[1].dead_ranks() == std::vector<int>{2});
    CHECK(job[1].describe_failure() == "rank 2 died");
    // It had used the store: nobody may take its place and clear its death.
    StderrCapture err;
    Stranger impostor(job.port);
    impostor.send(hello("2", "3"));
    bool closed = false;
    std::string got = impostor.read_until_closed(2.0, closed);
    CHECK(closed);
    CHECK(got.find("rank 2 has already been in this job and left it") != std::string::npos);
    CHECK(job[0].dead_ranks() == std::vector<int>{2});
  }
  SUBCASE("with a bye: not dead") {
    Job job(3, 2);
    Stranger rank2(job.port);
    rank2.send(hello("2", "3") + frame('B', ""));
    CHECK(rank2.read_n(9) == ack());
    rank2.close();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(job[0].dead_ranks().empty());
  }
}

TEST_CASE(
    "rendezvous: a rank that never connects is named, and a get waiting for it names its key") {
  Job job(3, 2);
  CHECK(job[0].absent_ranks() == std::vector<int>{2});
  CHECK(job[1].absent_ranks() == std::vector<int>{2});
  CHECK(job[1].describe_failure() == "rank 2 never connected");
  // A get for a key only the missing rank would set fails in time, naming it.
  Job late(3, 1);
  distributed::RendezvousOptions short_wait = job_options(late.port, 1, 3);
  short_wait.timeout = std::chrono::milliseconds(300);
  distributed::Rendezvous rank1(short_wait);
  CHECK_THROWS_WITH(rank1.get("key/2"), "rank 1: no rank set the key 'key/2' within 0.3 s");
  CHECK(late[0].absent_ranks() == std::vector<int>{2});
  // Once it has said hello it is no longer absent; gone without a bye, it died.
  {
    Stranger s(job.port);
    s.send(hello("2", "3"));
    CHECK(s.read_n(9) == ack());
    CHECK(job[0].absent_ranks().empty());
  }
  REQUIRE(wait_dead(job, 0, {2}));
  CHECK(job[1].describe_failure() == "rank 2 died");
}
