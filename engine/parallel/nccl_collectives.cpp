// NcclCollectives: distinct GPUs of this process through one NCCL communicator per
// device (ncclCommInitAll), every collective a group call across the devices, on
// each rank's stream. Uneven shards become groups of ncclReduce / ncclBroadcast
// with one root per shard, so no padding of the flat buffers is needed.
// Compiled in every CUDA build with NCCL; runs only where distinct GPUs exist.

#include <mutex>
#include <set>

#include "engine/core/check.h"
#include "engine/parallel/collectives.h"

#ifdef FANOUT_HAS_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#define FANOUT_NCCL_CHECK(expr)                                                               \
  do {                                                                                        \
    ncclResult_t fanout_res_ = (expr);                                                        \
    FANOUT_CHECK(fanout_res_ == ncclSuccess, "NCCL error: ", ncclGetErrorString(fanout_res_), \
                 " in `", #expr, "` at ", __FILE__, ":", __LINE__);                           \
  } while (0)
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

class NcclCollectives final : public Collectives {
 public:
  explicit NcclCollectives(const std::vector<Device>& devices) : comms_(devices.size()) {
    std::vector<int> ids;
    for (const Device& d : devices) ids.push_back(d.index);
    FANOUT_NCCL_CHECK(ncclCommInitAll(comms_.data(), static_cast<int>(ids.size()), ids.data()));
  }
  ~NcclCollectives() override {
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
  }
  const char* name() const override { return "nccl"; }

  void broadcast(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int root,
                 int64_t begin, int64_t end) override {
    if (end <= begin) return;
    std::lock_guard<std::mutex> lock(mu_);
    FANOUT_NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r < bufs.size(); ++r) {
      FANOUT_NCCL_CHECK(ncclBroadcast(ptr(bufs[root], begin), ptr(bufs[r], begin), end - begin,
                                      ncclFloat, root, comms_[r], stream(streams[r])));
    }
    FANOUT_NCCL_CHECK(ncclGroupEnd());
    count(bufs.size(), end - begin);
  }

  void reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int root,
              int64_t begin, int64_t end) override {
    if (end <= begin) return;
    std::lock_guard<std::mutex> lock(mu_);
    group_reduce(bufs, streams, root, begin, end);
  }

  void all_reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                  int64_t begin, int64_t end) override {
    if (end <= begin) return;
    check_sum_dtype();
    std::lock_guard<std::mutex> lock(mu_);
    count(bufs.size(), 2 * (end - begin));
    FANOUT_NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r < bufs.size(); ++r) {
      FANOUT_NCCL_CHECK(ncclAllReduce(ptr(bufs[r], begin), ptr(bufs[r], begin), end - begin,
                                      ncclFloat, ncclSum, comms_[r], stream(streams[r])));
    }
    FANOUT_NCCL_CHECK(ncclGroupEnd());
  }

  void reduce_scatter(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                      const std::vector<int64_t>& bounds, int64_t begin, int64_t end) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t q = 0; q < bufs.size(); ++q) {
      int64_t lo = std::max(begin, bounds[q]), hi = std::min(end, bounds[q + 1]);
      if (lo < hi) group_reduce(bufs, streams, static_cast<int>(q), lo, hi);
    }
  }

  void all_gather(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                  const std::vector<int64_t>& bounds, int64_t begin, int64_t end) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t q = 0; q < bufs.size(); ++q) {
      int64_t lo = std::max(begin, bounds[q]), hi = std::min(end, bounds[q + 1]);
      if (lo >= hi) continue;
      FANOUT_NCCL_CHECK(ncclGroupStart());
      for (size_t r = 0; r < bufs.size(); ++r) {
        FANOUT_NCCL_CHECK(ncclBroadcast(ptr(bufs[q], lo), ptr(bufs[r], lo), hi - lo, ncclFloat,
                                        static_cast<int>(q), comms_[r], stream(streams[r])));
      }
      FANOUT_NCCL_CHECK(ncclGroupEnd());
      count(bufs.size(), hi - lo);
    }
  }

 private:
  static float* ptr(const Tensor& t, int64_t offset) {
    FANOUT_ASSERT(t.dtype() == DType::f32, "NCCL collectives take f32 buffers, got ", t.str());
    return t.data<float>() + offset;
  }
  // What one call hands NCCL to move: every non-root rank's range once.
  void count(size_t ranks, int64_t n) {
    bytes_moved_ += static_cast<int64_t>(ranks - 1) * n * static_cast<int64_t>(sizeof(float));
  }
  void check_sum_dtype() const {
    FANOUT_CHECK(sum_dtype_ == DType::f32,
                 "bf16 gradient sums on CUDA devices arrive with the CUDA issue [3/6]");
  }
  static cudaStream_t stream(Stream* s) { return static_cast<cudaStream_t>(s->cuda_handle()); }

  void group_reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int root,
                    int64_t lo, int64_t hi) {
    check_sum_dtype();
    count(bufs.size(), hi - lo);
    FANOUT_NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r < bufs.size(); ++r) {
      FANOUT_NCCL_CHECK(ncclReduce(ptr(bufs[r], lo), ptr(bufs[r], lo), hi - lo, ncclFloat, ncclSum,
                                   root, comms_[r], stream(streams[r])));
    }
    FANOUT_NCCL_CHECK(ncclGroupEnd());
  }

  std::vector<ncclComm_t> comms_;
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(const std::vector<Device>& devices) {
  FANOUT_CHECK(distinct_gpus(devices), "NCCL needs distinct GPUs, got ", devices_str(devices));
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
#endif
  (void)distinct_gpus;
  return make_local_collectives();
}

}  // namespace fanout::parallel
