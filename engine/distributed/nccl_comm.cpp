// NcclComms (nccl_comm.h): non-blocking NCCL communicators with deadlines, a
// watchdog, and finalize-or-abort at the end. Compiled in CUDA builds with NCCL.

#ifdef FANOUT_HAS_NCCL
#include "engine/distributed/nccl_comm.h"

#include <algorithm>
#include <exception>

#include "engine/core/check.h"
#include "engine/core/cuda_check.h"
#include "engine/core/cuda_guard.h"

namespace fanout::distributed {

// Note [NCCL deadlines]
// The communicators are non-blocking (config.blocking = 0): every NCCL call
// returns at once, ncclInProgress while NCCL finishes it on a thread of its own
// (connecting the ranks at setup, queuing the kernels of a launch), and the next
// call may come only once ncclCommGetAsyncError says ncclSuccess. settle() polls
// for that with the deadline: setup and launches are bounded there.
//
// Launched work runs on the caller's streams, and the host waits for it where the
// engine synchronises them (Stream::synchronize), which knows nothing of NCCL: a
// kernel that waits for a dead rank would keep every wait on its stream going for
// ever. So a launch brackets its work on each stream with two events, and a
// watchdog thread checks every few milliseconds: when the first event completes
// the stream has reached the operation, which from then on waits only for the
// other ranks; when the second has not completed within the timeout after that,
// or as soon as NCCL reports an asynchronous error (a peer's connection dropped),
// it aborts the communicators. ncclCommAbort makes the waiting kernels exit, so the
// streams drain and the host's waits return; the failure -- naming what the
// rendezvous knows of the others -- is thrown by the next call on these
// communicators (at the latest every step's host all-reduce) and by wait(). The
// communicators of one process are aborted in one group, so all of their kernels
// are told to quit together (a freed buffer goes back to its pool only once the
// work queued before the free has run: Note [CUDA allocation ordering]).

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWatchPeriod = std::chrono::milliseconds(10);

bool failed(ncclResult_t r) {
  return r != ncclSuccess && r != ncclInProgress;
}
std::string nccl_cause(ncclResult_t r) {
  return detail::str_cat("NCCL: ", ncclGetErrorString(r));
}
std::string cuda_cause(cudaError_t e) {
  return detail::str_cat("CUDA: ", cudaGetErrorString(e));
}
std::string timed_out(std::chrono::milliseconds timeout) {
  return detail::str_cat("timed out after ", timeout.count() / 1000.0,
                         " s waiting for the other ranks");
}

// Polling: yield for the first millisecond (most waits end within it), then sleep.
void pause_since(Clock::time_point start) {
  if (Clock::now() - start < std::chrono::milliseconds(1))
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

}  // namespace

ncclUniqueId nccl_unique_id_share(Rendezvous& rendezvous, const std::string& key) {
  ncclUniqueId id;
  if (rendezvous.rank() == 0) {
    ncclResult_t made = ncclGetUniqueId(&id);
    FANOUT_CHECK(made == ncclSuccess, "rank 0: NCCL setup failed (", nccl_cause(made), ")");
    rendezvous.set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
  }
  std::vector<char> bytes = rendezvous.get(key);
  FANOUT_ASSERT(bytes.size() == sizeof id.internal, "bad NCCL unique id under ", key);
  std::copy(bytes.begin(), bytes.end(), id.internal);
  return id;
}

std::unique_ptr<NcclComms> nccl_comms_for_rank(Rendezvous& rendezvous, int device, double timeout_s,
                                               const std::string& key) {
  NcclCommsOptions o;
  o.devices = {device};
  o.ranks = {rendezvous.rank()};
  o.world = rendezvous.world();
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  o.who = detail::str_cat("rank ", rendezvous.rank());
  o.why = [&rendezvous] { return rendezvous.describe_failure(); };
  return std::make_unique<NcclComms>(nccl_unique_id_share(rendezvous, key), std::move(o));
}

// --- failures -----------------------------------------------------------------

// The first failure aborts the communicators and becomes the message of every later call.
std::string NcclComms::abort(const std::string& what, const std::string& cause) noexcept {
  if (aborted_) return failure_;
  aborted_ = true;  // before the abort: a wait() that sees its stream drain then throws
  abort_comms();
  std::string why;
  try {
    if (options_.why) why = options_.why();
  } catch (const std::exception&) {
    // Nothing known of the others.
  }
  failure_ = detail::str_cat(options_.who, ": ", what, " failed", why.empty() ? "" : ": ", why,
                             " (", cause, ")");
  return failure_;
}

void NcclComms::fail(const std::string& what, const std::string& cause) {
  detail::throw_error(abort(what, cause));
}

void NcclComms::throw_failure() {
  detail::throw_error(failure_);
}

// Runs f; an exception that is not already the failure (a CUDA error, a bug) aborts too.
template <typename F>
void NcclComms::guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    if (aborted_) throw;
    fail(what, e.what());
  }
}

// --- setup and teardown -------------------------------------------------------

NcclComms::NcclComms(const ncclUniqueId& id, NcclCommsOptions options)
    : options_(std::move(options)),
      comms_(options_.devices.size(), nullptr),
      spare_(options_.devices.size()) {
  FANOUT_ASSERT(!comms_.empty() && options_.ranks.size() == comms_.size(), comms_.size(),
                " devices and ", options_.ranks.size(), " ranks for NCCL");
  std::lock_guard<std::mutex> lock(mu_);
  const char* what = "NCCL setup";
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; settle() waits with the deadline
  guarded(what, [&] {
    group(what, [&] {
      for (size_t i = 0; i < comms_.size(); ++i) {
        CudaDeviceGuard on(device(i));  // a communicator takes the current device
        check(ncclCommInitRankConfig(&comms_[i], options_.world, id, options_.ranks[i], &config));
      }
    });
    settle(what);
    watchdog_ = std::thread([this] { watch(); });
  });
}

NcclComms::~NcclComms() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_ && !finalize()) abort_comms();
  for (size_t i = 0; i < comms_.size(); ++i) {
    std::vector<cudaEvent_t>& events = spare_[i];
    for (const Pending& p : pending_) {
      if (p.comm != i) continue;
      for (cudaEvent_t e : {p.start, p.end})
        if (e) events.push_back(e);
    }
    try {
      CudaDeviceGuard on(device(i));
      for (cudaEvent_t e : events) cudaEventDestroy(e);
    } catch (const std::exception&) {
      // The device is gone: nothing left to free.
    }
  }
}

// ncclCommFinalize flushes what was launched without blocking; then the
// communicators are destroyed together. False when that fails or times out.
bool NcclComms::finalize() noexcept {
  try {
    for (size_t i = 0; i < comms_.size(); ++i) {
      CudaDeviceGuard on(device(i));
      if (failed(ncclCommFinalize(comms_[i]))) return false;
    }
    auto start = Clock::now();
    ncclResult_t error = ncclSuccess;
    while (busy(&error)) {
      if (Clock::now() > start + options_.timeout) return false;
      pause_since(start);
    }
    if (failed(error)) return false;
    CudaDeviceGuard on(device(0));
    (void)ncclGroupStart();
    for (ncclComm_t c : comms_) (void)ncclCommDestroy(c);
    (void)ncclGroupEnd();
    std::fill(comms_.begin(), comms_.end(), nullptr);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// In one group, so that every communicator's kernels quit before any is freed.
void NcclComms::abort_comms() noexcept {
  try {
    CudaDeviceGuard on(device(0));
    (void)ncclGroupStart();
    for (ncclComm_t c : comms_)
      if (c) (void)ncclCommAbort(c);
    (void)ncclGroupEnd();
  } catch (const std::exception&) {
    // Binding the device failed: abort without it.
    for (ncclComm_t c : comms_)
      if (c) (void)ncclCommAbort(c);
  }
  std::fill(comms_.begin(), comms_.end(), nullptr);
}

// --- launches -----------------------------------------------------------------

void NcclComms::check(ncclResult_t result) {
  if (failed(result) && !failed(call_error_)) call_error_ = result;
}

// The calls in one group: all of them are queued, or (a failed call) none.
void NcclComms::group(const char* what, const std::function<void()>& calls) {
  call_error_ = ncclSuccess;
  ncclResult_t started = ncclGroupStart();
  if (failed(started)) fail(what, nccl_cause(started));
  try {
    calls();
  } catch (...) {
    (void)ncclGroupEnd();  // leave no group open on this thread
    throw;
  }
  ncclResult_t ended = ncclGroupEnd();
  if (failed(call_error_)) fail(what, nccl_cause(call_error_));
  if (failed(ended)) fail(what, nccl_cause(ended));
}

// Whether a communicator still works on the calls made so far; error: the first failure.
bool NcclComms::busy(ncclResult_t* error) {
  bool any = false;
  for (ncclComm_t c : comms_) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t asked = ncclCommGetAsyncError(c, &state);
    if (failed(asked)) state = asked;
    if (failed(state)) {
      *error = state;
      return false;
    }
    any |= state == ncclInProgress;
  }
  return any;
}

void NcclComms::settle(const char* what) {
  auto start = Clock::now();
  ncclResult_t error = ncclSuccess;
  while (busy(&error)) {
    if (Clock::now() > start + options_.timeout) fail(what, timed_out(options_.timeout));
    pause_since(start);
  }
  if (failed(error)) fail(what, nccl_cause(error));
}

cudaEvent_t NcclComms::take_event(size_t i) {
  if (!spare_[i].empty()) {
    cudaEvent_t e = spare_[i].back();
    spare_[i].pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  CudaDeviceGuard on(device(i));
  FANOUT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void NcclComms::launch(const char* what, const std::vector<cudaStream_t>& streams,
                       const std::function<void()>& calls) {
  FANOUT_ASSERT(streams.size() == comms_.size(), streams.size(), " streams for ", comms_.size(),
                " NCCL communicators");
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) throw_failure();
  guarded(what, [&] {
    std::vector<Pending*> mine;
    for (size_t i = 0; i < comms_.size(); ++i) {
      Pending& p = pending_.emplace_back();
      p.comm = i, p.what = what, p.start = take_event(i);
      CudaDeviceGuard on(device(i));
      FANOUT_CUDA_CHECK(cudaEventRecord(p.start, streams[i]));
      mine.push_back(&p);
    }
    group(what, calls);
    settle(what);  // NCCL's thread has queued the kernels on the streams
    for (size_t i = 0; i < comms_.size(); ++i) {
      cudaEvent_t end = take_event(i);
      CudaDeviceGuard on(device(i));
      cudaError_t recorded = cudaEventRecord(end, streams[i]);
      if (recorded != cudaSuccess) spare_[i].push_back(end);
      FANOUT_CUDA_CHECK(recorded);
      mine[i]->end = end;
    }
  });
}

void NcclComms::wait(size_t i, cudaStream_t stream, const char* what) {
  for (auto start = Clock::now();; pause_since(start)) {
    if (aborted_) break;
    cudaError_t done = cudaSuccess;
    {
      CudaDeviceGuard on(device(i));
      done = cudaStreamQuery(stream);
    }
    if (done == cudaSuccess) break;
    if (done != cudaErrorNotReady) {
      std::lock_guard<std::mutex> lock(mu_);
      fail(what, cuda_cause(done));
    }
  }
  // Also when the stream drained because the watchdog aborted the kernels.
  if (aborted_) {
    std::lock_guard<std::mutex> lock(mu_);
    throw_failure();
  }
}

// --- the watchdog -------------------------------------------------------------

void NcclComms::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && !aborted_) {
    wake_.wait_for(lock, kWatchPeriod);
    if (stop_ || aborted_) break;
    try {
      scan();
    } catch (const std::exception& e) {
      abort(pending_.empty() ? "watching NCCL" : pending_.front().what, e.what());
    }
  }
}

// One look at NCCL's error state and at every pending operation's events.
void NcclComms::scan() {
  ncclResult_t error = ncclSuccess;
  busy(&error);
  if (failed(error)) {
    abort(pending_.empty() ? "the connection to the other ranks" : pending_.front().what,
          nccl_cause(error));
    return;
  }
  const auto now = Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = *it;
    if (!p.end) {  // its launch failed
      ++it;
      continue;
    }
    CudaDeviceGuard on(device(p.comm));
    cudaError_t done = cudaEventQuery(p.end);
    if (done == cudaSuccess) {
      spare_[p.comm].push_back(p.start);
      spare_[p.comm].push_back(p.end);
      it = pending_.erase(it);
      continue;
    }
    if (done == cudaErrorNotReady && !p.running) {
      done = cudaEventQuery(p.start);
      if (done == cudaSuccess) p.running = true, p.since = now;
    }
    if (done != cudaSuccess && done != cudaErrorNotReady) {
      abort(p.what, cuda_cause(done));
      return;
    }
    if (p.running && now - p.since > options_.timeout) {
      abort(p.what, timed_out(options_.timeout));
      return;
    }
    ++it;
  }
}

}  // namespace fanout::distributed

#endif  // FANOUT_HAS_NCCL
