// Past one machine: two hosts simulated as two network namespaces joined by a
// veth pair, each running `fanout launch --nnodes 2 --node-rank i` with the
// first namespace's address as the master. The rendezvous and Gloo's traffic
// cross the veth link; the run must train what one process trains on the whole
// batch. Needs root (to create namespaces): skipped with the reason otherwise.

#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/command_util.h"
#include "tests/apps/fanout/launch_util.h"
#include "tests/paths_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {

// Two namespaces "fo<pid>a" and "fo<pid>b" joined by a veth pair, 10.213.<n>.1/24
// and .2/24, loopback up in each; deleted (with the pair) on destruction.
struct NetnsPair {
  std::string a, b, addr_a, addr_b;
  std::string why_not;  // why they could not be made ("" if they were)
  bool made_a = false, made_b = false;

  NetnsPair() {
    std::string id = std::to_string(::getpid());
    a = "fo" + id + "a", b = "fo" + id + "b";
    std::string net = "10.213." + std::to_string(::getpid() % 250);
    addr_a = net + ".1", addr_b = net + ".2";
    if (::geteuid() != 0) {
      why_not = "not root: creating network namespaces needs CAP_SYS_ADMIN";
      return;
    }
    if (shell("ip netns add " + a) != 0) {
      why_not = "'ip netns add' failed (no CAP_SYS_ADMIN in this container, or no iproute2)";
      return;
    }
    made_a = true;
    made_b = shell("ip netns add " + b) == 0;
    std::string va = "fo" + id + "va", vb = "fo" + id + "vb";
    const std::vector<std::string> steps = {"ip link add " + va + " type veth peer name " + vb,
                                            "ip link set " + va + " netns " + a,
                                            "ip link set " + vb + " netns " + b,
                                            "ip -n " + a + " addr add " + addr_a + "/24 dev " + va,
                                            "ip -n " + b + " addr add " + addr_b + "/24 dev " + vb,
                                            "ip -n " + a + " link set " + va + " up",
                                            "ip -n " + b + " link set " + vb + " up",
                                            "ip -n " + a + " link set lo up",
                                            "ip -n " + b + " link set lo up"};
    if (!made_b) why_not = "'ip netns add " + b + "' failed";
    for (const std::string& s : steps) {
      if (!why_not.empty()) break;
      if (shell(s) != 0) why_not = "'" + s + "' failed";
    }
  }
  ~NetnsPair() {
    // Deleting a namespace deletes its end of the pair, and with it the other end.
    if (made_a) shell("ip netns del " + a);
    if (made_b) shell("ip netns del " + b);
  }
};

std::vector<float> update(const std::vector<float>& final, const std::vector<float>& init) {
  std::vector<float> d(final.size());
  for (size_t i = 0; i < final.size(); ++i) d[i] = final[i] - init[i];
  return d;
}
}  // namespace

TEST_CASE("two nodes in two network namespaces train as one process does") {
  NetnsPair ns;
  if (!ns.why_not.empty()) {
    MESSAGE("skipped: " << ns.why_not);
    return;
  }
  TinyRun run;
  std::vector<float> init = weights_all(run.init);
  std::string single = run.dir / "single";
  CliResult r = run_fanout(concat(run.train_args(single, 3), {"--devices", "cpu:0"}));
  INFO("single stderr: " << r.err);
  REQUIRE(r.rc == 0);

  // One process per node; the master is the first namespace's address.
  int port = free_port();
  std::vector<std::string> env = {"FANOUT_JOB_SECRET=netns-" + std::to_string(::getpid()),
                                  "RANK",
                                  "WORLD_SIZE",
                                  "MASTER_ADDR",
                                  "MASTER_PORT",
                                  "FANOUT_LAUNCHER",
                                  "TORCHELASTIC_RUN_ID"};
  auto node = [&](int i, const std::string& netns, const std::string& out) {
    std::vector<std::string> args = {"/usr/sbin/ip",
                                     "netns",
                                     "exec",
                                     netns,
                                     test::fanout_binary(),
                                     "launch",
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(i),
                                     "--nproc-per-node",
                                     "1",
                                     "--master-addr",
                                     ns.addr_a,
                                     "--master-port",
                                     std::to_string(port),
                                     "--grace",
                                     "5",
                                     "--"};
    args = concat(args, run.train_args(out, 3));
    args = concat(args, {"--strategy", "ddp", "--devices", "cpu", "--timeout", "20"});
    return std::make_unique<Command>(args, env, run.dir / ("node" + std::to_string(i) + ".log"));
  };
  auto node0 = node(0, ns.a, run.dir / "multi");
  auto node1 = node(1, ns.b, run.dir / "node1-out");
  int rc0 = node0->wait(60), rc1 = node1->wait(10);
  std::string log0 = node0->output(), log1 = node1->output();
  INFO("node 0: " << log0 << "\nnode 1: " << log1);
  REQUIRE(rc0 == 0);
  REQUIRE(rc1 == 0);
  std::vector<std::string> line = lines_with(log0, "fanout: launcher: ");
  REQUIRE(line.size() == 1);
  MESSAGE(line[0]);
  CHECK(line[0] == "fanout: launcher: fanout launch (2 ranks on 2 nodes, master " + ns.addr_a +
                       ":" + std::to_string(port) + ")");
  CHECK(lines_with(log0, "2 processes (gloo").size() == 1);
  CHECK(lines_with(log1, "fanout: launcher: ").empty());

  // The single process's per-step loss and weight update, as test_cmd_launch.cpp compares.
  std::vector<double> ref_losses = metrics_losses(single + "/metrics.jsonl");
  std::vector<double> losses = metrics_losses(run.dir / "multi/metrics.jsonl");
  REQUIRE(losses.size() == ref_losses.size());
  for (size_t i = 0; i < ref_losses.size(); ++i)
    CHECK(std::abs(losses[i] - ref_losses[i]) <= 1e-5 * std::abs(ref_losses[i]));
  std::vector<float> ref_update = update(weights_all(single + "/final"), init);
  CHECK(relative_l2(ref_update, std::vector<float>(init.size(), 0.0f)) > 0);  // it did train
  CHECK(relative_l2(update(weights_all(run.dir / "multi/final"), init), ref_update) < 1e-3);
}
