#pragma once
// NcclComms: the NCCL communicators behind NcclGroup, NcclCommunicator and
// NcclCollectives -- one (this process's rank of a multi-process world) or one per
// GPU of this process -- made together, watched together and, when one fails,
// aborted together. Nothing here can hang: Note [NCCL deadlines] in nccl_comm.cpp.
// Include only from .cpp files compiled with FANOUT_HAS_NCCL (it includes nccl.h).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/distributed/rendezvous.h"

namespace fanout::distributed {

// Rank 0 makes NCCL's unique id and publishes it under `key`; every rank returns it.
ncclUniqueId nccl_unique_id_share(Rendezvous& rendezvous, const std::string& key);

struct NcclCommsOptions {
  std::vector<int> devices;  // communicator i on cuda:devices[i] ...
  std::vector<int> ranks;    // ... is rank ranks[i] of `world`
  int world = 1;
  std::chrono::milliseconds timeout{300000};
  std::string who;  // the failing side in messages: "rank 2", "NCCL on cuda:0,cuda:1"
  std::function<std::string()> why;  // what is known of the others ("rank 3 died"), or empty
};

class NcclComms {
 public:
  // Connects every communicator in one group call and waits until all are ready;
  // throws fanout::Error when that fails or the timeout passes.
  NcclComms(const ncclUniqueId& id, NcclCommsOptions options);
  // Finalizes them (flushing what was launched) within the timeout and destroys
  // them, or aborts them when that does not finish. Never throws.
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  size_t size() const { return comms_.size(); }
  int device(size_t i) const { return options_.devices[i]; }
  // For the calls of launch().
  ncclComm_t comm(size_t i) const { return comms_[i]; }

  // One operation: `calls` makes its NCCL calls, communicator i's on streams[i], each
  // result through check(); they form one group. Returns once NCCL queued them on the
  // streams; the watchdog watches them from there. Launches are serialised, so any
  // thread may call. Throws fanout::Error when these communicators failed, now or
  // before (then they are unusable).
  void launch(const char* what, const std::vector<cudaStream_t>& streams,
              const std::function<void()>& calls);
  // Inside launch(): ncclSuccess and ncclInProgress pass; any other result fails the launch.
  void check(ncclResult_t result);
  // The host waits until `stream` (on device(i)) ran what is queued on it; throws
  // fanout::Error when these communicators fail meanwhile.
  void wait(size_t i, cudaStream_t stream, const char* what);

 private:
  using Clock = std::chrono::steady_clock;
  // One launched operation on one stream, bracketed by two events.
  struct Pending {
    size_t comm = 0;
    cudaEvent_t start = nullptr, end = nullptr;
    const char* what = "";
    bool running = false;  // start has completed: the stream reached the operation
    Clock::time_point since;
  };

  // Everything below runs under mu_.
  template <typename F>
  void guarded(const char* what, F&& f);
  void group(const char* what, const std::function<void()>& calls);
  void settle(const char* what);
  bool busy(ncclResult_t* error);
  cudaEvent_t take_event(size_t i);
  void scan();
  bool finalize() noexcept;
  void abort_comms() noexcept;
  std::string abort(const std::string& what, const std::string& cause) noexcept;
  [[noreturn]] void fail(const std::string& what, const std::string& cause);
  [[noreturn]] void throw_failure();
  void watch();

  NcclCommsOptions options_;
  std::vector<ncclComm_t> comms_;
  std::mutex mu_;                          // every NCCL call on comms_, and the state below
  ncclResult_t call_error_ = ncclSuccess;  // the first failed call of the current launch
  std::list<Pending> pending_;
  std::vector<std::vector<cudaEvent_t>> spare_;  // completed events, per communicator
  std::atomic<bool> aborted_{false};
  std::string failure_;  // the message every later call throws
  bool stop_ = false;
  std::condition_variable wake_;
  std::thread watchdog_;
};

// This process's rank of the rendezvous's world on cuda:`device`, the unique id
// shared under `key`; failures name the rank and what the rendezvous knows of the
// others. `rendezvous` must outlive the communicator.
std::unique_ptr<NcclComms> nccl_comms_for_rank(Rendezvous& rendezvous, int device, double timeout_s,
                                               const std::string& key);

}  // namespace fanout::distributed
