#pragma once
// The ddp row of `fanout bench`: `fanout launch` starts one `fanout bench-worker`
// per listed device, and every rank gets the whole list and takes entry
// LOCAL_RANK of it (train::ddp_device), so cpu:0,cpu:0 puts both ranks on cpu:0
// and cpu:0,cpu:1 one on each. Each rank writes its figures to
// JSON.rankR; the row merges them (rank 0's time, every rank's peak bytes).
// Over NCCL a GPU listed twice cannot work (NCCL puts one rank on each GPU): that
// row fails with the reason before any process starts.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench/bench.h"
#include "engine/core/device.h"

namespace fanout::bench {

// A fresh directory only this process uses (mkdtemp: a name chosen in advance
// could already be someone's symlink), removed with its contents on every exit.
struct PrivateTempDir {
  explicit PrivateTempDir(const std::string& prefix);
  ~PrivateTempDir();
  PrivateTempDir(const PrivateTempDir&) = delete;
  PrivateTempDir& operator=(const PrivateTempDir&) = delete;
  std::string path;
};

// The arguments after the fanout binary that start the ddp row:
//   launch --nproc-per-node N -- bench-worker --devices D0,...,DN-1 FLAGS... --json JSON
// `worker_flags`: the model, batch and timing flags every rank shares.
std::vector<std::string> bench_ddp_launch_args(const std::vector<Device>& devices,
                                               const std::vector<std::string>& worker_flags,
                                               const std::string& json);

// "ddp (2 processes)": the row's label.
std::string bench_ddp_label(const std::vector<Device>& devices);

// Runs the ddp row with the fanout binary at `fanout`. Throws fanout::Error when it
// fails, with the first error a rank printed, or before starting any process when
// a GPU is listed twice (train::ddp_check_distinct_gpus). The ranks' stderr is kept
// aside and passed on to this process's stderr when the row succeeds.
presentation::BenchResult bench_ddp_run(const std::string& fanout,
                                        const std::vector<Device>& devices,
                                        const std::vector<std::string>& worker_flags);

// One rank's figures as the bench-worker writes them.
nlohmann::json bench_result_json(const presentation::BenchResult& r);

// What follows the first of `prefixes` on `log`'s first line holding one (a rank's
// "fanout: error: ..."), else `log`'s last non-empty line, else "".
std::string bench_first_error(const std::string& log, const std::vector<std::string>& prefixes);

}  // namespace fanout::bench
