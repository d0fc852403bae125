// The ddp row of `fanout bench` starts `fanout launch -- bench-worker` with the
// whole device list, and each rank takes entry LOCAL_RANK of it as
// `train --strategy ddp` does (train::ddp_device): `cpu:0,cpu:0` puts both ranks on
// cpu:0 and `cuda:1,cuda:0` rank 0 on cuda:1, instead of a bare kind that sends rank
// r to device r. A GPU listed twice is refused (NCCL refuses two ranks on one GPU),
// by the row before any process starts and by each rank. A failed row's reason is
// the first error line a rank printed.

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "apps/bench/bench_ddp.h"
#include "apps/train/ddp_env.h"
#include "engine/core/check.h"
#include "engine/core/device.h"

using namespace fanout;
using namespace fanout::presentation;
using namespace fanout::bench;

namespace {
// The device rank `rank` of the launch `args` trains on: what bench-worker does with
// its --devices under fanout launch (LOCAL_RANK = rank, LOCAL_WORLD_SIZE = nproc).
Device device_of_rank(const std::vector<std::string>& args, int rank) {
  auto nproc = std::find(args.begin(), args.end(), "--nproc-per-node");
  auto worker = std::find(args.begin(), args.end(), "bench-worker");
  auto devices = std::find(worker, args.end(), "--devices");
  REQUIRE(nproc + 1 < args.end());
  REQUIRE(devices + 1 < args.end());
  train::DdpEnv env;
  env.enabled = true;
  env.world = env.local_world = std::stoi(*(nproc + 1));
  env.rank = env.local_rank = rank;
  return train::ddp_device(env, devices_parse(*(devices + 1)));
}
}  // namespace

TEST_CASE("the ddp row gives each rank its listed device: cpu:0,cpu:0 is cpu:0 for both") {
  const std::vector<std::pair<std::string, std::vector<Device>>> cases = {
      {"cpu:0,cpu:1", {cpu_device(0), cpu_device(1)}},
      {"cpu:0,cpu:0", {cpu_device(0), cpu_device(0)}},
      {"cuda:1,cuda:0", {cuda_device(1), cuda_device(0)}},
      {"cuda:2,cuda:0,cuda:1", {cuda_device(2), cuda_device(0), cuda_device(1)}},
      {"cuda:0", {cuda_device(0)}},
  };
  for (const auto& [list, want] : cases) {
    CAPTURE(list);
    const std::vector<std::string> args =
        bench_ddp_launch_args(devices_parse(list), {"--steps", "1"}, "/tmp/b.json");
    REQUIRE(args.size() >= 5);
    CHECK(std::vector<std::string>(args.begin(), args.begin() + 5) ==
          std::vector<std::string>{"launch", "--nproc-per-node", std::to_string(want.size()), "--",
                                   "bench-worker"});
    for (size_t rank = 0; rank < want.size(); ++rank) {
      CAPTURE(rank);
      CHECK(device_of_rank(args, static_cast<int>(rank)).str() == want[rank].str());
    }
  }
}

TEST_CASE("the ddp row passes the shared flags to every rank and --json last") {
  const std::vector<std::string> args = bench_ddp_launch_args(
      {cpu_device(0), cpu_device(1)}, {"--steps", "3", "--preset", "tiny"}, "/tmp/d.json");
  CHECK(args == std::vector<std::string>{"launch", "--nproc-per-node", "2", "--", "bench-worker",
                                         "--devices", "cpu:0,cpu:1", "--steps", "3", "--preset",
                                         "tiny", "--json", "/tmp/d.json"});
}

TEST_CASE("a failed row's reason is the first error a rank printed, else the last line") {
  const std::vector<std::string> prefixes = {"fanout: error: ", "fanout: internal error: "};
  CHECK(bench_first_error("note\nfanout: error: cpu:0: out of memory\nfanout: error: later\n",
                          prefixes) == "cpu:0: out of memory");
  CHECK(bench_first_error("fanout launch: rank 1 exited with code 1; stopping the others\n\n",
                          prefixes) ==
        "fanout launch: rank 1 exited with code 1; stopping the others");
  CHECK(bench_first_error("", prefixes).empty());
  CHECK(bench_first_error("x\npeer_bench: error: no GPU\n", {"peer_bench: error: "}) == "no GPU");
}

TEST_CASE("the ddp row on a GPU listed twice fails naming it before starting a process") {
  const char* refusal =
      "ddp puts one process on each GPU and NCCL refuses two on one, but cuda:1 is listed "
      "twice: list distinct GPUs (two replicas on one GPU run in one process: --strategy dp or "
      "zero1..zero3)";
  // "/nonexistent/fanout": the refusal must come before anything is started.
  CHECK_THROWS_WITH_AS(
      bench_ddp_run("/nonexistent/fanout", devices_parse("cuda:1,cuda:0,cuda:1"), {}), refusal,
      Error);
  // And each rank refuses such a list itself (train --strategy ddp under a launcher).
  const std::vector<std::string> args =
      bench_ddp_launch_args(devices_parse("cuda:1,cuda:0,cuda:1"), {}, "/tmp/b.json");
  CHECK_THROWS_WITH_AS(device_of_rank(args, 0), refusal, Error);
}
