// NcclGroup: ProcessGroup over NCCL for one GPU per process (ddp on GPUs). Rank 0
// creates the unique id and publishes it through the rendezvous; every rank
// calls ncclCommInitRank. Collectives are queued on the caller's CUDA stream.
// Compiled in every CUDA build with NCCL; it runs only on machines with GPUs.

#include "engine/core/check.h"
#include "engine/parallel/process_group.h"

#ifdef FANOUT_HAS_NCCL
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
    float* p = buf.data<float>() + begin;
    FANOUT_NCCL_GROUP_CHECK(ncclAllReduce(p, p, end - begin, ncclFloat, ncclSum, comm_,
                                          static_cast<cudaStream_t>(stream.cuda_handle())));
  }

  void broadcast(const Tensor& buf, int root, Stream& stream) override {
    float* p = buf.data<float>();
    FANOUT_NCCL_GROUP_CHECK(ncclBroadcast(p, p, buf.numel(), ncclFloat, root, comm_,
                                          static_cast<cudaStream_t>(stream.cuda_handle())));
  }

  void all_reduce_host(double* values, int64_t n) override {
    FANOUT_ASSERT(n <= 64, "too many host scalars");
    FANOUT_CUDA_CHECK(cudaMemcpy(scratch_, values, n * sizeof(double), cudaMemcpyHostToDevice));
    FANOUT_NCCL_GROUP_CHECK(
        ncclAllReduce(scratch_, scratch_, n, ncclDouble, ncclSum, comm_, nullptr));
    FANOUT_CUDA_CHECK(cudaMemcpy(values, scratch_, n * sizeof(double), cudaMemcpyDeviceToHost));
  }

 private:
  [[noreturn]] void fail(const char* what, const char* cause) {
    detail::throw_error(detail::str_cat("rank ", rank(), ": NCCL ", what, " failed: ",
                                        rendezvous_.describe_failure(), " (", cause, ")"));
  }
  Device device_;
  ncclComm_t comm_ = nullptr;
  double* scratch_ = nullptr;
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
