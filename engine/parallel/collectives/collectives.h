#pragma once
// Collectives over flat buffers (f32; broadcast and all-gather also bf16), one buffer and one
// stream per rank, on a sub-range [begin, end) of the buffers. Each call behaves as if queued on
// every rank's stream (NCCL semantics): it starts after the work already queued there and work
// queued later sees its result. Calls must be made in the same order for all ranks; they may come
// from any thread (launches are serialised).
//
// Back-ends: LocalCollectives (CPU devices, several replicas on one GPU: copies
// through a staging buffer plus add kernels) and NcclCollectives (distinct GPUs,
// one non-blocking communicator per GPU, one group call per collective, a watchdog).

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::parallel {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual const char* name() const = 0;

  // The dtype sums travel in (reduce, all_reduce, reduce_scatter): f32, or bf16 --
  // each rank's contribution rounded before it is sent and the sum accumulated in
  // fp32 by the receiver (what DDP's bf16_compress_hook does), half the bytes.
  // Buffers stay f32 either way. Broadcast and all-gather move buffers as they are.
  void set_sum_dtype(DType dtype) {
    FANOUT_CHECK(dtype == DType::f32 || dtype == DType::bf16, "sums travel in f32 or bf16, not ",
                 dtype_name(dtype));
    sum_dtype_ = dtype;
  }
  DType sum_dtype() const { return sum_dtype_; }
  // Bytes this object copied from one device to another since it was made (or
  // reset): a copy within one device (replicas sharing it) moves nothing.
  int64_t bytes_moved() const { return bytes_moved_.load(); }
  void reset_bytes_moved() { bytes_moved_ = 0; }

  // bufs[r][begin, end) <- bufs[root][begin, end)
  virtual void broadcast(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                         int root, int64_t begin, int64_t end) = 0;
  // bufs[root][begin, end) <- sum over r of bufs[r][begin, end)
  virtual void reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                      int root, int64_t begin, int64_t end) = 0;
  // every rank <- the sum
  virtual void all_reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                          int64_t begin, int64_t end) = 0;
  // rank r's shard (bounds) within [begin, end) <- the sum of that range over ranks
  virtual void reduce_scatter(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                              const std::vector<int64_t>& bounds, int64_t begin, int64_t end) = 0;
  // every rank's copy of shard q within [begin, end) <- rank q's values
  virtual void all_gather(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                          const std::vector<int64_t>& bounds, int64_t begin, int64_t end) = 0;

 protected:
  DType sum_dtype_ = DType::f32;
  std::atomic<int64_t> bytes_moved_{0};
};

// Local copies + add kernels: works for any mix of devices, including one GPU
// named several times.
std::unique_ptr<Collectives> make_local_collectives();
// NCCL for distinct GPUs in this process; throws fanout::Error when this build
// has no NCCL or the devices are not distinct CUDA devices.
std::unique_ptr<Collectives> make_nccl_collectives(const std::vector<Device>& devices);
// NCCL when every device is a distinct GPU and NCCL is built in, else local.
std::unique_ptr<Collectives> make_collectives(const std::vector<Device>& devices);

}  // namespace fanout::parallel
