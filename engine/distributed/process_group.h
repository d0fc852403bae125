#pragma once
// ProcessGroup: collectives across the processes of a multi-process (ddp) run,
// one device per process — Gloo for CPU devices, NCCL for GPUs — set up through
// the Rendezvous. A failed or timed-out collective throws fanout::Error that
// names what the rendezvous knows: which rank died, or that none answered.

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/distributed/rendezvous.h"

namespace fanout::distributed {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual const char* name() const = 0;
  int rank() const { return rendezvous_.rank(); }
  int world() const { return rendezvous_.world(); }

  // buf[begin, end) <- the sum over ranks, queued on `stream` (the buffer's device):
  // the same bits on every rank. Under bf16 sums (set_sum_dtype) the values travel
  // as bf16 (DDP's bf16_compress_hook): each rank's contribution is rounded before
  // it is sent, each partial sum is taken in fp32 and rounded for the next hop, the
  // owner of a piece adds the arriving sum to its own values in fp32, and the
  // result is rounded to bf16 once and shared as it is.
  virtual void all_reduce(const Tensor& buf, int64_t begin, int64_t end, Stream& stream) = 0;
  virtual void set_sum_dtype(DType dtype) = 0;
  // Payload bytes this process handed the transport for other ranks (the rings'
  // sends: a reduce-scatter every piece of the range but this rank's own, an
  // all-gather every piece but rank r+1's, an all-reduce both over the range's
  // shard_bounds pieces: about (W-1)/W of the range each). Broadcasts and host
  // sums are not counted.
  int64_t bytes_sent() const { return bytes_sent_.load(); }
  void reset_bytes_sent() { bytes_sent_ = 0; }
  // buf <- rank root's values, queued on `stream`.
  virtual void broadcast(const Tensor& buf, int root, Stream& stream) = 0;
  // Host scalars: values[i] <- the sum over ranks, now.
  virtual void all_reduce_host(double* values, int64_t n) = 0;

  // ZeRO's collectives, with Collectives' semantics (collectives.h) across processes. `buf` is
  // this rank's flat buffer; `bounds` has world()+1 nondecreasing entries and rank r's piece is
  // [max(begin, bounds[r]), min(end, bounds[r+1])) (pieces may be empty or uneven). Both are
  // queued on `stream`, leave buf outside the pieces of [begin, end) alone, and must be called by
  // every rank in the same order.
  //
  // This rank's piece <- the sum of that piece over ranks; the rest of the pieces may be left
  // with any values. f32 buffers. Under bf16 sums each rank's contribution is rounded to bf16
  // before it is sent and each partial sum is taken in fp32 and rounded for the next hop (as in
  // all_reduce); the owner adds the arriving sum to its own (unrounded) values in fp32.
  virtual void reduce_scatter(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin,
                              int64_t end, Stream& stream) = 0;
  // Every rank's piece q <- rank q's values of that piece. f32 or bf16 buffers, moved as they are.
  virtual void all_gather(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin,
                          int64_t end, Stream& stream) = 0;

 protected:
  explicit ProcessGroup(Rendezvous& r) : rendezvous_(r) {}
  Rendezvous& rendezvous_;
  std::atomic<int64_t> bytes_sent_{0};
};

// Gloo over TCP for CPU devices; timeout_s bounds every collective.
std::unique_ptr<ProcessGroup> make_gloo_group(Rendezvous& rendezvous, double timeout_s);
// NCCL (the unique id through the rendezvous) for one GPU per process; timeout_s
// bounds setup and every collective from when its stream reaches it (a dead rank
// aborts the others' queued work, and their next call throws). Throws
// fanout::Error in builds without NCCL.
std::unique_ptr<ProcessGroup> make_nccl_group(Rendezvous& rendezvous, Device device,
                                              double timeout_s);

}  // namespace fanout::distributed
