// NcclCollectives: distinct GPUs of this process, one non-blocking NCCL
// communicator per device (NcclComms, nccl_comm.h: ncclCommInitRankConfig per
// device in one group around a shared unique id). Every collective is one group
// call across the devices, on each rank's stream; uneven shards become one group of
// ncclReduce / ncclBroadcast with one root per shard, so no padding of the flat
// buffers is needed. A watchdog aborts the group when a device fails or work waits
// past the timeout (Note [NCCL deadlines] in nccl_comm.cpp).
// Compiled in every CUDA build with NCCL; runs only where distinct GPUs exist.

#include <set>

#include "engine/core/check.h"
#include "engine/parallel/collectives.h"

#ifdef FANOUT_HAS_NCCL
#include <algorithm>
#include <chrono>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/core/cuda_check.h"
#include "engine/core/cuda_guard.h"
#include "engine/parallel/nccl_comm.h"
#endif

namespace fanout::parallel {

namespace {
bool distinct_gpus(const std::vector<Device>& devices) {
  std::set<int> seen;
  for (const Device& d : devices) {
    if (!d.is_cuda() || !seen.insert(d.index).second) return false;
  }
  return devices.size() > 1;
}
}  // namespace

#ifdef FANOUT_HAS_NCCL
namespace {

// No flag sets it (make_collectives takes none): as long as ddp's --timeout default.
constexpr std::chrono::milliseconds kTimeout{300000};

// Lets every pair of the GPUs reach each other's memory directly where the driver
// allows it (copies between them and NCCL's P2P transport take that path). The
// calling thread gets its device back.
void peer_access_enable(const std::vector<int>& ids) {
  for (int from : ids) {
    CudaDeviceGuard on(from);  // peer access is granted to the current device
    for (int to : ids) {
      if (to == from) continue;
      int can = 0;
      FANOUT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
      if (!can) continue;
      cudaError_t enabled = cudaDeviceEnablePeerAccess(to, 0);
      // Enabled before (fine), or past the device's number of peers (not allowed):
      // clear the error, so that no later check reports it.
      if (enabled == cudaErrorPeerAccessAlreadyEnabled || enabled == cudaErrorTooManyPeers) {
        (void)cudaGetLastError();
        continue;
      }
      FANOUT_CUDA_CHECK(enabled);
    }
  }
}

// Every rank's buffer from element `begin` on, as NCCL sees it.
struct Flat {
  std::vector<char*> at;  // per rank
  ncclDataType_t type = ncclFloat;
  int64_t elem = 4;  // bytes
};

class NcclCollectives final : public Collectives {
 public:
  explicit NcclCollectives(const std::vector<Device>& devices) {
    NcclCommsOptions o;
    for (int r = 0; r < static_cast<int>(devices.size()); ++r) {
      o.devices.push_back(devices[r].index);
      o.ranks.push_back(r);
    }
    peer_access_enable(o.devices);
    ncclUniqueId id;
    ncclResult_t made = ncclGetUniqueId(&id);
    FANOUT_CHECK(made == ncclSuccess, "NCCL on ", devices_str(devices),
                 ": setup failed (NCCL: ", ncclGetErrorString(made), ")");
    o.world = static_cast<int>(devices.size());
    o.timeout = kTimeout;
    o.who = "NCCL on " + devices_str(devices);
    comms_ = std::make_unique<NcclComms>(id, std::move(o));
  }
  const char* name() const override { return "nccl"; }

  // In place on every rank: the root sends, the others receive.
  void broadcast(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int root,
                 int64_t begin, int64_t end) override {
    if (end <= begin) return;
    Flat f = flat(bufs, begin, end, true);
    auto n = static_cast<size_t>(end - begin);
    comms_->launch("broadcast", cuda_streams(streams), [&] {
      for (size_t r = 0; r < bufs.size(); ++r)
        comms_->check(ncclBroadcast(f.at[r], f.at[r], n, f.type, root, comms_->comm(r),
                                    cuda_stream(streams[r])));
    });
    count(bufs.size(), (end - begin) * f.elem);
  }

  void reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int root,
              int64_t begin, int64_t end) override {
    if (end <= begin) return;
    check_sum_dtype();
    Flat f = flat(bufs, begin, end, false);
    auto n = static_cast<size_t>(end - begin);
    comms_->launch("reduce", cuda_streams(streams), [&] {
      for (size_t r = 0; r < bufs.size(); ++r)
        comms_->check(ncclReduce(f.at[r], f.at[r], n, ncclFloat, ncclSum, root, comms_->comm(r),
                                 cuda_stream(streams[r])));
    });
    count(bufs.size(), (end - begin) * f.elem);
  }

  void all_reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                  int64_t begin, int64_t end) override {
    if (end <= begin) return;
    check_sum_dtype();
    Flat f = flat(bufs, begin, end, false);
    auto n = static_cast<size_t>(end - begin);
    comms_->launch("all-reduce", cuda_streams(streams), [&] {
      for (size_t r = 0; r < bufs.size(); ++r)
        comms_->check(ncclAllReduce(f.at[r], f.at[r], n, ncclFloat, ncclSum, comms_->comm(r),
                                    cuda_stream(streams[r])));
    });
    count(bufs.size(), 2 * (end - begin) * f.elem);
  }

  // One group: an ncclReduce per non-empty shard, rooted at its owner.
  void reduce_scatter(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                      const std::vector<int64_t>& bounds, int64_t begin, int64_t end) override {
    std::vector<Shard> shards = shards_of(bufs.size(), bounds, begin, end);
    if (shards.empty()) return;
    check_sum_dtype();
    Flat f = flat(bufs, 0, end, false);
    comms_->launch("reduce-scatter", cuda_streams(streams), [&] {
      for (const Shard& sh : shards) {
        for (size_t r = 0; r < bufs.size(); ++r) {
          char* p = f.at[r] + sh.lo * f.elem;
          comms_->check(ncclReduce(p, p, sh.count(), ncclFloat, ncclSum, sh.owner, comms_->comm(r),
                                   cuda_stream(streams[r])));
        }
      }
    });
    for (const Shard& sh : shards) count(bufs.size(), (sh.hi - sh.lo) * f.elem);
  }

  // One group: an ncclBroadcast per non-empty shard, from its owner.
  void all_gather(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                  const std::vector<int64_t>& bounds, int64_t begin, int64_t end) override {
    std::vector<Shard> shards = shards_of(bufs.size(), bounds, begin, end);
    if (shards.empty()) return;
    Flat f = flat(bufs, 0, end, true);
    comms_->launch("all-gather", cuda_streams(streams), [&] {
      for (const Shard& sh : shards) {
        for (size_t r = 0; r < bufs.size(); ++r) {
          char* p = f.at[r] + sh.lo * f.elem;
          comms_->check(ncclBroadcast(p, p, sh.count(), f.type, sh.owner, comms_->comm(r),
                                      cuda_stream(streams[r])));
        }
      }
    });
    for (const Shard& sh : shards) count(bufs.size(), (sh.hi - sh.lo) * f.elem);
  }

 private:
  // Shard `owner`'s part [lo, hi) of a range.
  struct Shard {
    int owner;
    int64_t lo, hi;
    size_t count() const { return static_cast<size_t>(hi - lo); }
  };
  static std::vector<Shard> shards_of(size_t ranks, const std::vector<int64_t>& bounds,
                                      int64_t begin, int64_t end) {
    FANOUT_ASSERT(bounds.size() == ranks + 1, bounds.size(), " shard bounds for ", ranks, " ranks");
    std::vector<Shard> shards;
    for (size_t q = 0; q < ranks; ++q) {
      int64_t lo = std::max(begin, bounds[q]), hi = std::min(end, bounds[q + 1]);
      if (lo < hi) shards.push_back({static_cast<int>(q), lo, hi});
    }
    return shards;
  }

  // Every rank's buffer from element `begin` on (up to `end`); sums take f32,
  // moves bf16 too.
  Flat flat(const std::vector<Tensor>& bufs, int64_t begin, int64_t end, bool bf16_too) const {
    FANOUT_ASSERT(bufs.size() == comms_->size(), bufs.size(), " buffers for ", comms_->size(),
                  " NCCL ranks");
    Flat f;
    DType dtype = bufs[0].dtype();
    FANOUT_ASSERT(dtype == DType::f32 || (bf16_too && dtype == DType::bf16),
                  "NCCL collectives take f32 buffers", bf16_too ? " or bf16 ones" : "", ", got ",
                  bufs[0].str());
    f.type = dtype == DType::bf16 ? ncclBfloat16 : ncclFloat;
    f.elem = static_cast<int64_t>(dtype_size(dtype));
    for (size_t r = 0; r < bufs.size(); ++r) {
      const Tensor& t = bufs[r];
      FANOUT_ASSERT(t.dtype() == dtype && t.device().index == comms_->device(r) &&
                        t.device().is_cuda() && 0 <= begin && end <= t.numel(),
                    "NCCL rank ", r, " (cuda:", comms_->device(r), ") got ", t.str(), " for [",
                    begin, ", ", end, ")");
      f.at.push_back(static_cast<char*>(t.raw()) + begin * f.elem);
    }
    return f;
  }
  // What one call hands NCCL to move: every non-root rank's range once.
  void count(size_t ranks, int64_t bytes) {
    bytes_moved_ += static_cast<int64_t>(ranks - 1) * bytes;
  }
  void check_sum_dtype() const {
    FANOUT_CHECK(sum_dtype_ == DType::f32,
                 "bf16 gradient sums are not supported between CUDA devices yet: "
                 "use --grad-comm fp32");
  }
  static cudaStream_t cuda_stream(Stream* s) { return static_cast<cudaStream_t>(s->cuda_handle()); }
  static std::vector<cudaStream_t> cuda_streams(const std::vector<Stream*>& streams) {
    std::vector<cudaStream_t> out;
    for (Stream* s : streams) out.push_back(cuda_stream(s));
    return out;
  }

  std::unique_ptr<NcclComms> comms_;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(const std::vector<Device>& devices) {
  FANOUT_CHECK(distinct_gpus(devices), "NCCL needs distinct GPUs, got ", devices_str(devices));
  devices_check_available(devices);
  return std::make_unique<NcclCollectives>(devices);
}

#else

std::unique_ptr<Collectives> make_nccl_collectives(const std::vector<Device>& devices) {
  detail::throw_error(detail::str_cat("NCCL collectives for ", devices_str(devices),
                                      " are not available: this build has no NCCL"));
}

#endif

std::unique_ptr<Collectives> make_collectives(const std::vector<Device>& devices) {
#ifdef FANOUT_HAS_NCCL
  if (distinct_gpus(devices)) return make_nccl_collectives(devices);
#else
  (void)devices, (void)distinct_gpus;
#endif
  return make_local_collectives();
}

}  // namespace fanout::parallel
