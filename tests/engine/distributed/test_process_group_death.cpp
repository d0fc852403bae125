// The Gloo ProcessGroup across real OS processes when a rank dies in the middle
// of a collective: the others must stop within a second or so of the death,
// long before the group's timeout, with one line naming the dead rank. The hard
// case is a send already handed to the pair (its receiver had posted the
// receive) when the receiver stops reading and then dies: Gloo fails the pair
// but never wakes a wait on such a send, so only the rendezvous' liveness can
// end it (GlooWatch). The dying rank stops itself (SIGSTOP) in the middle of the
// collective, its buffer too large to have gone through, and a survivor kills
// it (SIGKILL) a moment later, as a crash or an OOM kill would.
// The children are forked: Note [Forking the test binary] (fork_util.h).

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/distributed/process_group.h"
#include "tests/engine/distributed/fork_util.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using namespace fanout::test::fork;
using distributed::ProcessGroup;
namespace rdzv = fanout::test::rdzv;

namespace {

constexpr int kWorld = 3;
constexpr double kTimeoutS = 60;
// 32 MiB a piece in a 3-rank ring: far more than a loopback socket buffers.
constexpr int64_t kN = 3 * (int64_t{8} << 20);

using Collective = std::function<void(ProcessGroup&, const Tensor&, Stream&)>;

struct Named {
  const char* what;  // as the error names it
  Collective run;
};

const std::vector<Named>& collectives() {
  static const std::vector<Named> all = {
      {"all-reduce",
       [](ProcessGroup& g, const Tensor& b, Stream& s) { g.all_reduce(b, 0, kN, s); }},
      {"all-reduce",
       [](ProcessGroup& g, const Tensor& b, Stream& s) {
         g.set_sum_dtype(DType::bf16);
         g.all_reduce(b, 0, kN, s);
       }},
      {"reduce-scatter",
       [](ProcessGroup& g, const Tensor& b, Stream& s) {
         g.reduce_scatter(b, shard_bounds(kN, kWorld), 0, kN, s);
       }},
      {"all-gather", [](ProcessGroup& g, const Tensor& b,
                        Stream& s) { g.all_gather(b, shard_bounds(kN, kWorld), 0, kN, s); }},
      {"broadcast", [](ProcessGroup& g, const Tensor& b, Stream& s) { g.broadcast(b, 0, s); }},
  };
  return all;
}

}  // namespace

TEST_CASE(
    "process group across OS processes: a rank stopped and then killed in the middle of a "
    "collective ends it on the others within seconds, long before the timeout") {
  for (size_t c = 0; c < collectives().size(); ++c) {
    for (int dying : {1, 2}) {
      const Named& op = collectives()[c];
      CAPTURE(op.what);
      CAPTURE(c);
      CAPTURE(dying);
      const int port = rdzv::free_port();
      SharedCounter pid;  // the dying rank's, once it is about to stop
      std::vector<Outcome> out = run_children(kWorld, 30, [&](int rank) {
        distributed::Rendezvous r("127.0.0.1", port, rank, kWorld,
                                  std::chrono::milliseconds(10000));
        std::unique_ptr<ProcessGroup> g = distributed::make_gloo_group(r, kTimeoutS);
        double one = 1;
        g->all_reduce_host(&one, 1);  // every rank is connected
        if (one != kWorld) throw Mismatch("the host all-reduce gave " + std::to_string(one));
        Stream s(cpu_device(0), "comm");
        Tensor buf = Tensor::empty({kN}, DType::f32, cpu_device(0));
        std::memset(buf.raw(), 0, buf.nbytes());
        std::thread killer;
        if (rank == (dying == 1 ? 0 : 1))
          killer = std::thread([&] {
            while ((*pid).load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            ::kill((*pid).load(), SIGKILL);
          });
        auto t0 = std::chrono::steady_clock::now();
        std::string what = "ok";
        try {
          op.run(*g, buf, s);
          if (rank == dying) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));  // its receives posted
            (*pid) = static_cast<int>(::getpid());
            ::raise(SIGSTOP);
          }
          s.synchronize();
        } catch (const Error& e) {
          what = e.what();
        }
        const double took = rdzv::seconds_since(t0);
        if (killer.joinable()) killer.join();
        return what + "\n" + std::to_string(took);
      });
      for (int r = 0; r < kWorld; ++r) {
        CAPTURE(r);
        CAPTURE(out[r].said);
        if (r == dying) {
          CHECK(out[r].ended == "signal 9 (Killed)");
          continue;
        }
        REQUIRE(out[r].ended == "exit 0");
        const size_t nl = out[r].said.rfind('\n');
        REQUIRE(nl != std::string::npos);
        const std::string what = out[r].said.substr(0, nl);
        // A broadcast's receivers other than the dying rank may have all they need.
        if (what != "ok" || op.what != std::string("broadcast") || r == 0) {
          CHECK(what.find("rank " + std::to_string(r) + ": " + op.what + " failed: rank " +
                          std::to_string(dying) + " died (gloo: ") != std::string::npos);
          CHECK(what.find('\n') == std::string::npos);
        }
        // The death comes about 0.3 s in; then a look or two of the watch.
        CHECK(std::stod(out[r].said.substr(nl + 1)) < 3);
      }
    }
  }
}
