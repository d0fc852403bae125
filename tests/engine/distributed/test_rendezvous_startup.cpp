// The meeting of all ranks that ddp start-up holds before any library builds a
// connection per peer (Rendezvous::wait_for_all, Note [Bounded ddp start-up]),
// on 127.0.0.1 with every rank in this process: it returns on every rank once
// all have said hello, and otherwise ends within its time on each rank with one
// line naming the absent ranks as ranges, however many there are.

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tests/apps/fanout/cli_runner.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::rdzv;

namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Ranks `present` (rank 0 first, which serves) of a `world`-rank job on one port.
struct PartJob {
  int port = free_port();
  std::vector<std::unique_ptr<distributed::Rendezvous>> ranks;
  PartJob(int world, const std::vector<int>& present) {
    for (int r : present)
      ranks.push_back(std::make_unique<distributed::Rendezvous>(job_options(port, r, world)));
  }
  ~PartJob() {
    while (!ranks.empty()) ranks.pop_back();  // rank 0, the master, last
  }
};

// What wait_for_all(within) throws on each rank of `job` at once, and the seconds each took.
std::vector<std::pair<std::string, double>> wait_all_ranks(PartJob& job, milliseconds within) {
  std::vector<std::pair<std::string, double>> got(job.ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < job.ranks.size(); ++i)
    threads.emplace_back([&, i] {
      auto t0 = Clock::now();
      got[i].first = error_of([&] { job.ranks[i]->wait_for_all(within); });
      got[i].second = std::chrono::duration<double>(Clock::now() - t0).count();
    });
  for (auto& t : threads) t.join();
  return got;
}
}  // namespace

TEST_CASE("rendezvous: every rank passes the meeting once all have said hello") {
  for (int world : {1, 2, 5}) {
    CAPTURE(world);
    std::vector<int> all;
    for (int r = 0; r < world; ++r) all.push_back(r);
    PartJob job(world, all);
    for (const auto& [error, seconds] : wait_all_ranks(job, milliseconds(5000))) {
      CHECK(error.empty());
      CHECK(seconds < 2.0);
    }
    // A second meeting (a second mesh on the same rendezvous) passes at once too.
    for (const auto& [error, seconds] : wait_all_ranks(job, milliseconds(5000)))
      CHECK(error.empty());
  }
}

TEST_CASE("rendezvous: a meeting with absent ranks ends within its time, naming them in one line") {
  struct Case {
    int world;
    std::vector<int> present;
    std::string absent;  // as every present rank names them
  };
  std::vector<int> evens;
  for (int r = 0; r < 40; r += 2) evens.push_back(r);
  for (const Case& c : std::vector<Case>{
           {2, {0}, "rank 1 of 2"},
           {1024, {0, 1}, "ranks 2-1023 of 1024"},
           {20, {0, 3, 7}, "ranks 1-2, 4-6, 8-19 of 20"},
           {40, evens, "ranks 1, 3, 5, 7, 9, 11, 13, 15 and 12 more of 40"},
       }) {
    CAPTURE(c.absent);
    PartJob job(c.world, c.present);
    for (const auto& [error, seconds] : wait_all_ranks(job, milliseconds(600))) {
      CAPTURE(error);
      CHECK(has(error, c.absent + " never connected to the master at 127.0.0.1:" +
                           std::to_string(job.port)));
      CHECK(error.find('\n') == std::string::npos);
      CHECK(seconds < 0.6 + 1.5);
    }
  }
}
