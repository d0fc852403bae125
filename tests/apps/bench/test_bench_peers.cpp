// Which PyTorch peers `fanout bench --peers` runs on a device list, and which it
// skips with a reason: nccl DDP and nn.DataParallel cannot put two workers on one
// GPU, processes on CPU devices can share the cores; every peer sees the listed
// GPUs as its cuda:0, cuda:1, ... (through CUDA_VISIBLE_DEVICES). Without a
// python that has torch, or without peer_bench.py, every peer is skipped, none fails.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "apps/bench/bench_peers.h"
#include "engine/core/device.h"

using namespace fanout;
using namespace fanout::bench;

namespace {
const PeerPlan& plan_of(const std::vector<PeerPlan>& plans, const std::string& label) {
  for (const PeerPlan& p : plans)
    if (p.label.rfind(label, 0) == 0) return p;
  FAIL("no peer " << label);
  return plans[0];
}
}  // namespace

TEST_CASE("peers on one GPU listed twice: eager and torch.compile run, nccl DDP and DP skip") {
  const std::vector<PeerPlan> plans = bench_peers_plan(devices_parse("cuda:0,cuda:0"), nullptr);
  REQUIRE(plans.size() == 4);
  CHECK(plans[0].label == "PyTorch eager");
  CHECK(plans[0].flags == "--mode single");
  CHECK(plans[1].label == "PyTorch torch.compile");
  CHECK(plans[1].flags == "--mode single --compile");
  for (int i : {0, 1}) {
    CHECK(plans[i].skip.empty());
    CHECK(plans[i].cuda_visible == "0");
  }
  const PeerPlan& ddp = plan_of(plans, "PyTorch DDP");
  CHECK(ddp.label == "PyTorch DDP (nccl, 2 processes)");
  CHECK(ddp.skip == "nccl puts one process on each GPU, and cuda:0 is listed twice");
  const PeerPlan& dp = plan_of(plans, "PyTorch nn.DataParallel");
  CHECK(dp.skip == "it needs distinct GPUs, and cuda:0 is listed twice");
}

TEST_CASE("peers on distinct GPUs run, each seeing the listed GPUs as its own cuda:0, cuda:1") {
  std::vector<PeerPlan> plans = bench_peers_plan(devices_parse("cuda:1,cuda:3"), nullptr);
  REQUIRE(plans.size() == 4);
  for (const PeerPlan& p : plans) CHECK(p.skip.empty());
  CHECK(plans[0].cuda_visible == "1");
  CHECK(plan_of(plans, "PyTorch DDP").cuda_visible == "1,3");
  CHECK(plan_of(plans, "PyTorch DDP").flags == "--mode ddp --backend nccl --nproc 2");
  CHECK(plan_of(plans, "PyTorch nn.DataParallel").flags == "--mode dp --nproc 2");
  // Under CUDA_VISIBLE_DEVICES=4,5,6,7 fanout's cuda:1 is the machine's GPU 5.
  plans = bench_peers_plan(devices_parse("cuda:1,cuda:3"), "4,5,6,7");
  CHECK(plans[0].cuda_visible == "5");
  CHECK(plan_of(plans, "PyTorch DDP").cuda_visible == "5,7");
  plans = bench_peers_plan(devices_parse("cuda:0"), nullptr);
  CHECK(plan_of(plans, "PyTorch DDP").label == "PyTorch DDP (nccl, 1 process)");
  CHECK(plan_of(plans, "PyTorch nn.DataParallel").label == "PyTorch nn.DataParallel (1 GPU)");
}

TEST_CASE("peers on CPU devices: gloo DDP over one process per listed device, no DP") {
  const std::vector<PeerPlan> plans = bench_peers_plan(devices_parse("cpu:0,cpu:0"), nullptr);
  REQUIRE(plans.size() == 3);
  const PeerPlan& ddp = plan_of(plans, "PyTorch DDP");
  CHECK(ddp.label == "PyTorch DDP (gloo, 2 processes)");
  CHECK(ddp.flags == "--mode ddp --backend gloo --nproc 2");
  for (const PeerPlan& p : plans) {
    CHECK(p.skip.empty());
    CHECK(p.cuda_visible.empty());
  }
}

TEST_CASE("without torch or without peer_bench.py every peer is skipped, in every precision") {
  PeerRequest q;
  q.script = "/nonexistent/peer_bench.py";
  q.config = "tiny";
  q.precisions = {"fp32", "bf16"};
  for (const std::string python : {"", "/bin/true"}) {
    CAPTURE(python);
    q.python = python;
    const std::vector<PeerRow> rows = bench_peers_run(q, devices_parse("cpu:0,cpu:1"));
    REQUIRE(rows.size() == 6);  // eager, torch.compile and DDP, in fp32 and in bf16
    for (const PeerRow& r : rows) {
      CAPTURE(r.label);
      CHECK(r.status == "skipped");
      CHECK(r.reason == (python.empty() ? "no python3 that imports torch was found"
                                        : "cannot find /nonexistent/peer_bench.py (set "
                                          "FANOUT_REFERENCE_DIR)"));
    }
    CHECK(rows[0].label == "PyTorch eager, fp32");
    CHECK(rows[5].label == "PyTorch DDP (gloo, 2 processes), bf16 autocast");
  }
}
