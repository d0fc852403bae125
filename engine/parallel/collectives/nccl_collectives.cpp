// NcclCollectives: distinct GPUs of this process, one non-blocking NCCL
// communicator per device (NcclComms, nccl_comm.h: ncclCommInitRankConfig per
// device in one group around a shared unique id). Every collective is one group
// call across the devices, on each rank's stream; uneven shards become one group of
// ncclReduce / ncclBroadcast with one root per shard, so no padding of the flat
// buffers is needed. A watchdog aborts the group when a device fails or work waits
// past the timeout (Note [NCCL deadlines] in nccl_comm.cpp). Sums under
// --grad-comm bf16 travel as bf16 and add up in fp32: Note [bf16 sums over NCCL].
// Compiled in every CUDA build with NCCL; runs only where distinct GPUs exist.

#include <map>
#include <mutex>
#include <set>

#include "engine/core/check.h"
#include "engine/parallel/collectives/collectives.h"

#ifdef FANOUT_HAS_NCCL
#include <algorithm>
#include <chrono>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/core/cuda_check.h"
#include "engine/core/cuda_guard.h"
#include "engine/core/flat.h"
#include "engine/distributed/nccl_comm.h"
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

// Note [bf16 sums over NCCL]
// Under --grad-comm bf16 a sum travels as bf16 and is accumulated in fp32 by its
// receiver. NCCL's own bf16 reductions (ncclReduce / ncclAllReduce on
// ncclBfloat16) add in bf16, a rounding per partial sum that the CPU paths do not
// make, so the sums here are built from point-to-point bf16 moves (ncclSend /
// ncclRecv in one group) and the fp32 add kernels of engine/core/flat.h, in the
// order of the CPU path each backend stands in for; the results are the same bits.
//
// NcclCollectives (GPUs of one process) stands in for LocalCollectives:
//   reduce(root)    every other rank rounds its range to bf16 (flat_round_bf16 on
//                   its stream) and sends it to the root, which receives each into
//                   a staging slot of its own and adds the slots to its unrounded
//                   values in rank order (flat_add), as LocalCollectives::sum_into;
//   all_reduce      reduce to rank 0, then broadcast its f32 sum (LocalCollectives'
//                   own definition);
//   reduce_scatter  an all-to-all of the rounded shards: rank q sends shard r to
//                   its owner r, which adds the arrivals in rank order.
//   Bytes: (W-1) bf16 copies of the range (reduce) or of every shard
//   (reduce-scatter), half of the f32 path's count and what LocalCollectives moves.
//   The root of a reduce receives all W-1 copies itself (no tree or ring), which
//   is what the local path does too; DataParallel reduces buckets, not models.
// NcclGroup (one GPU per process) stands in for GlooGroup: nccl_group.cpp runs
// GlooGroup's bf16 ring reduce-scatter step by step (a send to rank r+1 and a
// receive from rank r-1 per step, then a hop kernel: the arrival plus this rank's
// rounded piece, in fp32, rounded), the same bits as Gloo's; all_reduce is that
// ring with the owner's piece rounded too, then a bf16 all-gather of the pieces,
// 2 (W-1)/W of the range in bf16 per rank like Gloo's ring. Gloo's own ring
// all-reduce associates a piece's terms in its own order: the two agree bit for
// bit for W = 2 (one fp32 add, commutative), and otherwise to the rounding of the
// hops (the same definition, another association).

// Every rank's buffer from element `begin` on, as NCCL sees it.
struct Flat {
  std::vector<char*> at;  // per rank
  ncclDataType_t type = ncclFloat;
  int64_t elem = 4;  // bytes
};

class NcclCollectives final : public Collectives {
 public:
  explicit NcclCollectives(const std::vector<Device>& devices) {
    distributed::NcclCommsOptions o;
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
    comms_ = std::make_unique<distributed::NcclComms>(id, std::move(o));
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
    if (sum_dtype_ == DType::bf16) return reduce_bf16(bufs, streams, root, begin, end);
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
    if (sum_dtype_ == DType::bf16) {
      // LocalCollectives' definition (Note [bf16 sums over NCCL]).
      reduce_bf16(bufs, streams, 0, begin, end);
      return broadcast(bufs, streams, 0, begin, end);
    }
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
    if (sum_dtype_ == DType::bf16) return reduce_scatter_bf16(bufs, streams, shards);
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

  // Note [bf16 sums over NCCL]: the senders round into their send buffers, one
  // group moves the bf16 values into the root's staging slots, and the root adds
  // the slots in rank order.
  void reduce_bf16(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int root,
                   int64_t begin, int64_t end) {
    (void)flat(bufs, begin, end, false);  // checks the buffers
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t n = end - begin;
    const size_t W = bufs.size();
    std::vector<Tensor> send(W);
    for (size_t r = 0; r < W; ++r) {
      if (static_cast<int>(r) == root) continue;
      send[r] = buffer(kSend, *streams[r], n);
      flat_round_bf16(*streams[r], send[r], bufs[r].view(begin, {n}));
    }
    Tensor stage = buffer(kStage, *streams[root], n * static_cast<int64_t>(W - 1));
    comms_->launch("reduce", cuda_streams(streams), [&] {
      int64_t slot = 0;
      for (size_t r = 0; r < W; ++r) {
        if (static_cast<int>(r) == root) continue;
        comms_->check(ncclSend(send[r].raw(), static_cast<size_t>(n), ncclBfloat16, root,
                               comms_->comm(r), cuda_stream(streams[r])));
        comms_->check(ncclRecv(stage.view(slot++ * n, {n}).raw(), static_cast<size_t>(n),
                               ncclBfloat16, static_cast<int>(r), comms_->comm(root),
                               cuda_stream(streams[root])));
      }
    });
    Tensor dst = bufs[root].view(begin, {n});
    for (size_t k = 0; k + 1 < W; ++k)
      flat_add(*streams[root], dst, stage.view(static_cast<int64_t>(k) * n, {n}));
    count(W, n * 2);
  }

  // Note [bf16 sums over NCCL]: an all-to-all of the rounded shards, each owner
  // adding its arrivals in rank order.
  void reduce_scatter_bf16(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                           const std::vector<Shard>& shards) {
    const int64_t lo = shards.front().lo, m = shards.back().hi - lo;
    (void)flat(bufs, lo, lo + m, false);  // checks the buffers
    std::lock_guard<std::mutex> lock(mu_);
    const size_t W = bufs.size();
    std::vector<Tensor> send(W), stage(W);
    for (size_t q = 0; q < W; ++q) {
      send[q] = buffer(kSend, *streams[q], m);
      flat_round_bf16(*streams[q], send[q], bufs[q].view(lo, {m}));
    }
    for (const Shard& sh : shards) {
      const auto cnt = static_cast<int64_t>(sh.count());
      stage[sh.owner] = buffer(kStage, *streams[sh.owner], cnt * static_cast<int64_t>(W - 1));
    }
    comms_->launch("reduce-scatter", cuda_streams(streams), [&] {
      for (const Shard& sh : shards) {
        const auto cnt = static_cast<int64_t>(sh.count());
        int64_t slot = 0;
        for (size_t q = 0; q < W; ++q) {
          if (static_cast<int>(q) == sh.owner) continue;
          comms_->check(ncclSend(send[q].view(sh.lo - lo, {cnt}).raw(), sh.count(), ncclBfloat16,
                                 sh.owner, comms_->comm(q), cuda_stream(streams[q])));
          comms_->check(ncclRecv(stage[sh.owner].view(slot++ * cnt, {cnt}).raw(), sh.count(),
                                 ncclBfloat16, static_cast<int>(q), comms_->comm(sh.owner),
                                 cuda_stream(streams[sh.owner])));
        }
      }
    });
    for (const Shard& sh : shards) {
      const auto cnt = static_cast<int64_t>(sh.count());
      Tensor dst = bufs[sh.owner].view(sh.lo, {cnt});
      for (size_t k = 0; k + 1 < W; ++k)
        flat_add(*streams[sh.owner], dst,
                 stage[sh.owner].view(static_cast<int64_t>(k) * cnt, {cnt}));
      count(W, cnt * 2);
    }
  }

  // One growing bf16 buffer per stream and use (tagged comm in its device's
  // allocator): send buffers on the sending stream, staging on the receiving one;
  // the stream's order makes reuse safe. Replacing a buffer drops the old one
  // only after the stream finished with it. Under mu_.
  enum Use { kSend, kStage };
  Tensor buffer(Use use, Stream& s, int64_t numel) {
    Tensor& t = buffers_[{&s, use}];
    if (!t.defined() || t.numel() < numel) {
      s.synchronize();
      t = Tensor::empty({numel}, DType::bf16, s.device(), MemTag::comm);
    }
    return t.view(0, {numel});
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
  static cudaStream_t cuda_stream(Stream* s) { return static_cast<cudaStream_t>(s->cuda_handle()); }
  static std::vector<cudaStream_t> cuda_streams(const std::vector<Stream*>& streams) {
    std::vector<cudaStream_t> out;
    for (Stream* s : streams) out.push_back(cuda_stream(s));
    return out;
  }

  std::unique_ptr<distributed::NcclComms> comms_;
  std::mutex mu_;  // buffers_ and the bf16 sums that use them
  std::map<std::pair<Stream*, Use>, Tensor> buffers_;
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
