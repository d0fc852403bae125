// NcclCommunicator: the members are processes with one GPU each. Rank 0 publishes
// NCCL's unique id under "<name>/nccl-unique-id"; the communicator is made
// non-blocking (NcclComms, nccl_comm.h), so no NCCL call can hang: an exchange is
// one group of ncclSend / ncclRecv (any piece sizes, the uneven ones included) on
// the member's stream, and the host waits for the stream while a watchdog aborts
// the communicator when a member dies or the timeout passes; the exchange then
// throws, naming what the rendezvous knows (Note [NCCL deadlines] in nccl_comm.cpp).
// Compiled in every CUDA build with NCCL; it runs only on machines with GPUs.

#include "engine/comm/communicator.h"
#include "engine/core/check.h"

#ifdef FANOUT_HAS_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/distributed/nccl_comm.h"
#endif

namespace fanout::comm {

#ifdef FANOUT_HAS_NCCL
namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(distributed::Rendezvous& r, Device device, double timeout_s,
                   const std::string& name)
      : Communicator(r.rank(), r.world(), device) {
    comms_ = distributed::nccl_comms_for_rank(r, device.index, timeout_s, name + "/nccl-unique-id");
  }
  const char* backend() const override { return "nccl"; }

 protected:
  void exchange(const std::vector<Tensor>& sends, const std::vector<Tensor>& recvs) override {
    auto s = static_cast<cudaStream_t>(stream().cuda_handle());
    comms_->launch(doing(), {s}, [&] {
      ncclComm_t c = comms_->comm(0);
      for (int j = 0; j < size(); ++j) {
        if (j == rank()) continue;
        if (sends[j].defined() && sends[j].nbytes() > 0)
          comms_->check(ncclSend(sends[j].raw(), sends[j].nbytes(), ncclUint8, j, c, s));
        if (recvs[j].defined() && recvs[j].nbytes() > 0)
          comms_->check(ncclRecv(recvs[j].raw(), recvs[j].nbytes(), ncclUint8, j, c, s));
      }
    });
    comms_->wait(0, s, doing());
  }

 private:
  std::unique_ptr<distributed::NcclComms> comms_;  // finalized before the base's stream goes
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(distributed::Rendezvous& rendezvous,
                                                     Device device, double timeout_s,
                                                     const std::string& name) {
  FANOUT_CHECK(device.is_cuda() && !device.is_bare(), "NCCL communicators need a CUDA device, got ",
               device.str());
  devices_check_available({device});
  return std::make_unique<NcclCommunicator>(rendezvous, device, timeout_s, name);
}

#else

std::unique_ptr<Communicator> make_nccl_communicator(distributed::Rendezvous&, Device device,
                                                     double, const std::string&) {
  detail::throw_error(detail::str_cat("a process communicator on ", device.str(),
                                      " needs NCCL, and this build has none"));
}

#endif

}  // namespace fanout::comm
