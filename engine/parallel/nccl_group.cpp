// NcclGroup: ProcessGroup over NCCL for one GPU per process (ddp on GPUs). Rank 0
// creates the unique id and publishes it through the rendezvous; every rank
// calls ncclCommInitRank. Collectives are queued on the caller's CUDA stream;
// launches on the communicator are serialised (mu_), as callers may be several
// streams' threads.
// Compiled in every CUDA build with NCCL; it runs only on machines with GPUs.

#include "engine/core/check.h"
#include "engine/parallel/process_group.h"

#ifdef FANOUT_HAS_NCCL
#include <algorithm>
#include <mutex>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/core/cuda_check.h"
#endif

namespace fanout::parallel {

#ifdef FANOUT_HAS_NCCL
namespace {

#define FANOUT_NCCL_GROUP_CHECK(expr)                                             \
  do {                                                                            \
    ncclResult_t fanout_res_ = (expr);                                            \
    if (fanout_res_ != ncclSuccess) fail(#expr, ncclGetErrorString(fanout_res_)); \
  } while (0)

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(Rendezvous& r, Device device) : ProcessGroup(r), device_(device) {
    FANOUT_CHECK(device.is_cuda(), "NCCL process groups need CUDA devices, got ", device.str());
    ncclUniqueId id;
    if (r.rank() == 0) {
      FANOUT_NCCL_GROUP_CHECK(ncclGetUniqueId(&id));
      r.set("nccl/unique-id", std::vector<char>(id.internal, id.internal + sizeof id.internal));
    }
    std::vector<char> bytes = r.get("nccl/unique-id");
    FANOUT_ASSERT(bytes.size() == sizeof id.internal, "bad NCCL unique id");
    std::copy(bytes.begin(), bytes.end(), id.internal);
    FANOUT_CUDA_CHECK(cudaSetDevice(device.index));
    FANOUT_NCCL_GROUP_CHECK(ncclCommInitRank(&comm_, r.world(), id, r.rank()));
    FANOUT_CUDA_CHECK(cudaMalloc(&scratch_, 64 * sizeof(double)));
  }
  ~NcclGroup() override {
    cudaFree(scratch_);
    ncclCommDestroy(comm_);
  }
  const char* name() const override { return "nccl"; }
  void set_sum_dtype(DType dtype) override {
    FANOUT_CHECK(dtype == DType::f32,
                 "bf16 gradient sums on CUDA devices arrive with the CUDA issue [3/6]");
  }

  void all_reduce(const Tensor& buf, int64_t begin, int64_t end, Stream& stream) override {
    if (end <= begin) return;
    std::lock_guard<std::mutex> lock(mu_);
    float* p = buf.data<float>() + begin;
    FANOUT_NCCL_GROUP_CHECK(ncclAllReduce(p, p, end - begin, ncclFloat, ncclSum, comm_,
                                          static_cast<cudaStream_t>(stream.cuda_handle())));
  }

  void broadcast(const Tensor& buf, int root, Stream& stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    float* p = buf.data<float>();
    FANOUT_NCCL_GROUP_CHECK(ncclBroadcast(p, p, buf.numel(), ncclFloat, root, comm_,
                                          static_cast<cudaStream_t>(stream.cuda_handle())));
  }

  // Equal pieces covering the range go to ncclReduceScatter in place; otherwise
  // one ncclReduce per non-empty piece, rooted at its owner, in one group. Sums
  // are f32 (set_sum_dtype refuses bf16). bytes_sent_ counts what a ring sends:
  // every piece but this rank's own.
  void reduce_scatter(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin,
                      int64_t end, Stream& stream) override {
    FANOUT_ASSERT(buf.device().is_cuda() && buf.dtype() == DType::f32, "NCCL reduce-scatter of ",
                  buf.str());
    std::vector<int64_t> at = piece_edges(buf, bounds, begin, end);
    if (at.front() == at.back()) return;
    std::lock_guard<std::mutex> lock(mu_);
    float* p = buf.data<float>();
    auto s = static_cast<cudaStream_t>(stream.cuda_handle());
    int64_t n = at[1] - at[0];
    if (even(at)) {
      FANOUT_NCCL_GROUP_CHECK(
          ncclReduceScatter(p + at[0], p + at[rank()], n, ncclFloat, ncclSum, comm_, s));
    } else {
      FANOUT_NCCL_GROUP_CHECK(ncclGroupStart());
      for (int q = 0; q < world(); ++q) {
        if (at[q] == at[q + 1]) continue;
        FANOUT_NCCL_GROUP_CHECK(
            ncclReduce(p + at[q], p + at[q], at[q + 1] - at[q], ncclFloat, ncclSum, q, comm_, s));
      }
      FANOUT_NCCL_GROUP_CHECK(ncclGroupEnd());
    }
    bytes_sent_ += (at.back() - at.front() - (at[rank() + 1] - at[rank()])) *
                   static_cast<int64_t>(sizeof(float));
  }

  // Equal pieces covering the range go to ncclAllGather in place; otherwise one
  // ncclBroadcast per non-empty piece from its owner, in one group. bytes_sent_
  // counts what a ring in rank order sends: every piece but rank r+1's (NCCL's
  // ring order may differ; the sum over ranks is the same).
  void all_gather(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin, int64_t end,
                  Stream& stream) override {
    FANOUT_ASSERT(
        buf.device().is_cuda() && (buf.dtype() == DType::f32 || buf.dtype() == DType::bf16),
        "NCCL all-gather of ", buf.str());
    std::vector<int64_t> at = piece_edges(buf, bounds, begin, end);
    if (at.front() == at.back()) return;
    std::lock_guard<std::mutex> lock(mu_);
    ncclDataType_t type = buf.dtype() == DType::bf16 ? ncclBfloat16 : ncclFloat;
    size_t elem = dtype_size(buf.dtype());
    auto* p = static_cast<char*>(buf.raw());
    auto s = static_cast<cudaStream_t>(stream.cuda_handle());
    if (even(at)) {
      FANOUT_NCCL_GROUP_CHECK(
          ncclAllGather(p + at[rank()] * elem, p + at[0] * elem, at[1] - at[0], type, comm_, s));
    } else {
      FANOUT_NCCL_GROUP_CHECK(ncclGroupStart());
      for (int q = 0; q < world(); ++q) {
        if (at[q] == at[q + 1]) continue;
        FANOUT_NCCL_GROUP_CHECK(ncclBroadcast(p + at[q] * elem, p + at[q] * elem, at[q + 1] - at[q],
                                              type, q, comm_, s));
      }
      FANOUT_NCCL_GROUP_CHECK(ncclGroupEnd());
    }
    int next = (rank() + 1) % world();
    bytes_sent_ +=
        (at.back() - at.front() - (at[next + 1] - at[next])) * static_cast<int64_t>(elem);
  }

  void all_reduce_host(double* values, int64_t n) override {
    FANOUT_ASSERT(n <= 64, "too many host scalars");
    FANOUT_CUDA_CHECK(cudaMemcpy(scratch_, values, n * sizeof(double), cudaMemcpyHostToDevice));
    {
      std::lock_guard<std::mutex> lock(mu_);
      FANOUT_NCCL_GROUP_CHECK(
          ncclAllReduce(scratch_, scratch_, n, ncclDouble, ncclSum, comm_, nullptr));
    }
    FANOUT_CUDA_CHECK(cudaMemcpy(values, scratch_, n * sizeof(double), cudaMemcpyDeviceToHost));
  }

 private:
  // Piece q of [begin, end) is [at[q], at[q+1]) (process_group.h): the bounds
  // clamped to the range.
  std::vector<int64_t> piece_edges(const Tensor& buf, const std::vector<int64_t>& bounds,
                                   int64_t begin, int64_t end) const {
    FANOUT_ASSERT(static_cast<int>(bounds.size()) == world() + 1, bounds.size(),
                  " piece bounds for ", world(), " ranks");
    FANOUT_ASSERT(std::is_sorted(bounds.begin(), bounds.end()), "piece bounds must not decrease");
    FANOUT_ASSERT(0 <= begin && end <= buf.numel(), "range [", begin, ", ", end, ") of ",
                  buf.str());
    std::vector<int64_t> at(bounds.size(), begin);
    if (end <= begin) return at;  // an empty range: empty pieces
    for (size_t q = 0; q < bounds.size(); ++q) at[q] = std::clamp(bounds[q], begin, end);
    return at;
  }
  // Every piece has the same (non-zero) size.
  bool even(const std::vector<int64_t>& at) const {
    for (int q = 1; q < world(); ++q)
      if (at[q + 1] - at[q] != at[1] - at[0]) return false;
    return at[1] > at[0];
  }

  [[noreturn]] void fail(const char* what, const char* cause) {
    detail::throw_error(detail::str_cat("rank ", rank(), ": NCCL ", what, " failed: ",
                                        rendezvous_.describe_failure(), " (", cause, ")"));
  }
  Device device_;
  ncclComm_t comm_ = nullptr;
  double* scratch_ = nullptr;
  std::mutex mu_;  // launches on comm_
};

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_group(Rendezvous& rendezvous, Device device) {
  return std::make_unique<NcclGroup>(rendezvous, device);
}

#else

std::unique_ptr<ProcessGroup> make_nccl_group(Rendezvous&, Device device) {
  detail::throw_error(
      detail::str_cat("ddp on ", device.str(), " needs NCCL, and this build has none"));
}

#endif

}  // namespace fanout::parallel
