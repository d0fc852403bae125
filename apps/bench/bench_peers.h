#pragma once
// The PyTorch peers of `fanout bench --peers` (tests/reference/peer_bench.py) on
// the same config and global batch: eager and torch.compile on the first listed
// device, DDP over one process per listed device (gloo on CPU, nccl on GPUs) and,
// on GPUs, nn.DataParallel over the listed ones. A peer that cannot run on these
// devices or with this PyTorch is skipped with the reason; one that fails is a
// failed row with its reason; neither stops the other peers nor the bench.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace fanout::bench {

struct PeerPlan {
  std::string label;  // "PyTorch DDP (gloo, 2 processes)"
  std::string flags;  // peer_bench.py's: "--mode ddp --backend gloo --nproc 2"
  // CUDA_VISIBLE_DEVICES for it, so that the listed GPUs are its cuda:0, cuda:1, ...
  // ("" on CPU devices).
  std::string cuda_visible;
  std::string skip;  // why it cannot run on the listed devices ("" when it can)
};
// The peers for `devices`, in table order. `inherited`: this process's
// CUDA_VISIBLE_DEVICES (nullptr when unset), whose Nth entry fanout calls cuda:N.
std::vector<PeerPlan> bench_peers_plan(const std::vector<Device>& devices, const char* inherited);

struct PeerRow {
  std::string label, precision;
  std::string status = "ok";  // ok, skipped or failed
  std::string reason;         // why it was skipped or failed
  double tokens_per_s = 0;
};

struct PeerRequest {
  std::string python;  // a python3 that imports torch ("": every peer is skipped)
  std::string script;  // peer_bench.py
  std::string config;  // a preset name or a config.json
  int64_t batch_size = 16, seq_len = 128;
  int steps = 5, warmup = 1;
  std::vector<std::string> precisions;  // fp32, bf16: every peer in each
};
// Runs every planned peer in every precision. Throws fanout::Error only when a
// peer was interrupted (Ctrl-C), so that the bench stops with it.
std::vector<PeerRow> bench_peers_run(const PeerRequest& request,
                                     const std::vector<Device>& devices);

// The first of $FANOUT_PYTHON, /usr/bin/python3 and python3 that imports torch (as a
// word for /bin/sh), or "".
std::string bench_peers_python();

}  // namespace fanout::bench
