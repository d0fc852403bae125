// NcclCommunicator: the members are processes with one GPU each. Rank 0 publishes
// NCCL's unique id under "<name>/nccl-unique-id"; the communicator is made
// non-blocking, so no NCCL call can hang: an exchange is one group of ncclSend /
// ncclRecv (any piece sizes, the uneven ones included) on the member's stream, and
// the host polls the stream and NCCL's error state until the timeout, when it
// aborts the communicator and throws, naming what the rendezvous knows.
// Compiled in every CUDA build with NCCL; it runs only on machines with GPUs.

#include "engine/core/check.h"
#include "engine/parallel/communicator.h"

#ifdef FANOUT_HAS_NCCL
#include <algorithm>
#include <chrono>
#include <thread>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/core/cuda_check.h"
#endif

namespace fanout::parallel {

#ifdef FANOUT_HAS_NCCL
namespace {

using Clock = std::chrono::steady_clock;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Rendezvous& r, Device device, double timeout_s, const std::string& name)
      : Communicator(r.rank(), r.world(), device),
        rendezvous_(r),
        timeout_(static_cast<int64_t>(timeout_s * 1000)) {
    FANOUT_CUDA_CHECK(cudaSetDevice(device.index));
    ncclUniqueId id;
    const std::string key = name + "/nccl-unique-id";
    if (r.rank() == 0) {
      check(ncclGetUniqueId(&id), "connecting the members");
      r.set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
    }
    std::vector<char> bytes = r.get(key);
    FANOUT_ASSERT(bytes.size() == sizeof id.internal, "bad NCCL unique id under ", key);
    std::copy(bytes.begin(), bytes.end(), id.internal);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return at once; settle() waits with a deadline
    check(ncclCommInitRankConfig(&comm_, r.world(), id, r.rank(), &config),
          "connecting the members");
    settle("connecting the members");
  }

  ~NcclCommunicator() override {
    if (!comm_) return;
    cudaSetDevice(device().index);
    if (aborted_) return;  // ncclCommAbort freed it
    ncclResult_t finalized = ncclCommFinalize(comm_);
    bool clean = finalized == ncclSuccess || finalized == ncclInProgress;
    for (auto deadline = Clock::now() + timeout_; clean;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) break;
      if (state != ncclInProgress || Clock::now() > deadline) clean = false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (clean)
      ncclCommDestroy(comm_);
    else
      ncclCommAbort(comm_);
  }
  const char* backend() const override { return "nccl"; }

 protected:
  void exchange(const std::vector<Tensor>& sends, const std::vector<Tensor>& recvs) override {
    FANOUT_CUDA_CHECK(cudaSetDevice(device().index));
    auto s = static_cast<cudaStream_t>(stream().cuda_handle());
    check(ncclGroupStart(), doing());
    for (int j = 0; j < size(); ++j) {
      if (j == rank()) continue;
      if (sends[j].defined() && sends[j].nbytes() > 0)
        check(ncclSend(sends[j].raw(), sends[j].nbytes(), ncclUint8, j, comm_, s), doing());
      if (recvs[j].defined() && recvs[j].nbytes() > 0)
        check(ncclRecv(recvs[j].raw(), recvs[j].nbytes(), ncclUint8, j, comm_, s), doing());
    }
    check(ncclGroupEnd(), doing());
    settle(doing());
    // The transfers are queued on the stream: wait for them, watching NCCL's state.
    for (auto deadline = Clock::now() + timeout_;;) {
      cudaError_t done = cudaStreamQuery(s);
      if (done == cudaSuccess) return;
      if (done != cudaErrorNotReady) abort(doing(), cudaGetErrorString(done));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress)
        abort(doing(), ncclGetErrorString(state));
      if (Clock::now() > deadline) abort(doing(), "timed out waiting for the other members");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  // A non-blocking call returns ncclInProgress while it completes in the background.
  void check(ncclResult_t res, const char* what) {
    if (res != ncclSuccess && res != ncclInProgress) abort(what, ncclGetErrorString(res));
  }
  // Waits until the calls made so far completed (ncclInProgress ends).
  void settle(const char* what) {
    for (auto deadline = Clock::now() + timeout_;;) {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), what);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) abort(what, ncclGetErrorString(state));
      if (Clock::now() > deadline) abort(what, "timed out waiting for the other members");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  [[noreturn]] void abort(const char* what, const std::string& cause) {
    if (comm_ && !aborted_) {
      ncclCommAbort(comm_);
      aborted_ = true;
    }
    detail::throw_error(detail::str_cat("rank ", rank(), ": ", what, " failed: ",
                                        rendezvous_.describe_failure(), " (NCCL: ", cause, ")"));
  }

  Rendezvous& rendezvous_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Rendezvous& rendezvous, Device device,
                                                     double timeout_s, const std::string& name) {
  FANOUT_CHECK(device.is_cuda() && !device.is_bare(), "NCCL communicators need a CUDA device, got ",
               device.str());
  devices_check_available({device});
  return std::make_unique<NcclCommunicator>(rendezvous, device, timeout_s, name);
}

#else

std::unique_ptr<Communicator> make_nccl_communicator(Rendezvous&, Device device, double,
                                                     const std::string&) {
  detail::throw_error(detail::str_cat("a process communicator on ", device.str(),
                                      " needs NCCL, and this build has none"));
}

#endif

}  // namespace fanout::parallel
