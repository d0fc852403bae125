#pragma once
// ProcessGroup: collectives across the processes of a multi-process (ddp) run,
// one device per process — Gloo for CPU devices, NCCL for GPUs — set up through
// the Rendezvous. A failed or timed-out collective throws fanout::Error that
// names what the rendezvous knows: which rank died, or that none answered.

#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/parallel/rendezvous.h"

namespace fanout::parallel {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual const char* name() const = 0;
  int rank() const { return rendezvous_.rank(); }
  int world() const { return rendezvous_.world(); }

  // buf[begin, end) <- the sum over ranks, queued on `stream` (the buffer's device).
  // Under bf16 sums (set_sum_dtype) the values travel as bf16: each rank's
  // contribution is rounded before it is sent, each partial sum is taken in fp32
  // and rounded for the next hop (DDP's bf16_compress_hook), identically on every
  // rank.
  virtual void all_reduce(const Tensor& buf, int64_t begin, int64_t end, Stream& stream) = 0;
  virtual void set_sum_dtype(DType dtype) = 0;
  // Payload bytes this process handed the transport for other ranks (the
  // algorithm's sends: a ring all-reduce sends 2 (W-1)/W of the buffer).
  int64_t bytes_sent() const { return bytes_sent_.load(); }
  void reset_bytes_sent() { bytes_sent_ = 0; }
  // buf <- rank root's values, queued on `stream`.
  virtual void broadcast(const Tensor& buf, int root, Stream& stream) = 0;
  // Host scalars: values[i] <- the sum over ranks, now.
  virtual void all_reduce_host(double* values, int64_t n) = 0;

 protected:
  explicit ProcessGroup(Rendezvous& r) : rendezvous_(r) {}
  Rendezvous& rendezvous_;
  std::atomic<int64_t> bytes_sent_{0};
};

// Gloo over TCP for CPU devices; timeout_s bounds every collective.
std::unique_ptr<ProcessGroup> make_gloo_group(Rendezvous& rendezvous, double timeout_s);
// NCCL (ncclCommInitRank, the unique id through the rendezvous) for one GPU per
// process; throws fanout::Error in builds without NCCL.
std::unique_ptr<ProcessGroup> make_nccl_group(Rendezvous& rendezvous, Device device);

}  // namespace fanout::parallel
