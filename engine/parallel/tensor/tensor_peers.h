#pragma once
// TensorPeers: the rendezvous behind tensor parallelism's collectives. A group of
// T ranks (devices), each driven by its own host thread, reaches "all-reduce this
// activation" at the same point of its program; the last rank to arrive queues one
// Collectives call over every rank's buffer and stream, and every rank goes on.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/parallel/collectives/collectives.h"

namespace fanout::parallel {

// Note [Tensor peers rendezvous]
// Host waits only for "queued": a collective is ordered by the streams (Collectives
// semantics: it starts after the work already queued on each rank's stream, and
// work queued later sees its result), so a rank's host thread needs only that the
// collective is queued before it queues what reads the result. Waiting for device
// work would serialise host and device and lose the overlap the streams exist for.
// The last arrival queues it while holding the lock, before it bumps the
// generation: no rank's buffer or stream is touched after that rank's call returned.
//
// Rounds are generation-counted: a caller waits for the generation it arrived in
// to end. The last arrival clears the deposits before it bumps the generation, so
// a fast rank that comes back for the next collective deposits into the next round
// (which cannot end before every waiter of this one has woken and arrived there).
// Ranks disagreeing on a round (kind, size, dtype) or a rank's bad arguments are
// noted as they arrive; the last arrival then queues nothing and the round throws
// fanout::Error on every rank of it, rather than one rank throwing and the others
// hanging.
//
// Abort avoids hangs: a rank that fails calls abort() (as its step's wrapper
// does); every rank waiting in a round wakes and throws StepAborted, and every
// call until reset() throws it at once, so no rank waits for one that will never
// come. reset(), between steps, waits for aborted waiters to leave.
class TensorPeers {
 public:
  // One tensor-parallel group: devices[r] is rank r. Collectives over them through
  // make_collectives(devices) (local copies, or NCCL over distinct GPUs).
  explicit TensorPeers(std::vector<Device> devices);
  ~TensorPeers();
  TensorPeers(const TensorPeers&) = delete;
  TensorPeers& operator=(const TensorPeers&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  const std::vector<Device>& devices() const { return devices_; }

  // Called by every rank's own thread, in the same order on every rank, each with
  // its buffer (on devices()[rank]) and its stream. Every caller returns once the
  // collective is queued on every rank's stream, never waiting for device work.
  // With size() == 1 each is a no-op. A rank's stream must outlive the group: the
  // Collectives keep staging buffers per stream (a device's compute stream does).

  // buf[0, n) on every rank <- the sum over ranks (f32; bit-identical on every rank).
  void all_reduce(int rank, const Tensor& buf, Stream& stream, int64_t n);
  // buf holds size() parts of `part` elements; rank r's part [r*part, (r+1)*part)
  // is copied to every rank (f32 or bf16).
  void all_gather(int rank, const Tensor& buf, Stream& stream, int64_t part);
  // buf holds size() parts of `part`; rank r's part <- the sum of that part over
  // all ranks (f32). The other parts of buf are left unspecified.
  void reduce_scatter(int rank, const Tensor& buf, Stream& stream, int64_t part);

  // A rank failed: every rank waiting in a collective, and every later call until
  // reset(), throws StepAborted.
  void abort();
  // Ready for the next step: drops a half-arrived round; waits for ranks an abort
  // woke to leave. Throws fanout::Error when ranks wait in a round not aborted.
  void reset();

  // Bytes moved between distinct devices so far (the Collectives' counter).
  int64_t bytes_moved() const { return collectives_->bytes_moved(); }

 private:
  enum class Kind { all_reduce, all_gather, reduce_scatter };
  // What a rank asked for: the round's arrivals must all agree on it.
  struct Request {
    Kind kind = Kind::all_reduce;
    int64_t count = 0;  // n for all_reduce, part otherwise
    DType dtype = DType::f32;
  };

  void rendezvous(int rank, const Request& req, const Tensor& buf, Stream& stream);
  // Why rank's arguments cannot take part (empty when they can).
  std::string argument_problem(int rank, const Request& req, const Tensor& buf,
                               const Stream& stream) const;
  void launch(const Request& req);
  static std::string request_str(const Request& req);

  std::vector<Device> devices_;
  std::unique_ptr<Collectives> collectives_;

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // rounds ended so far (completed or refused)
  int arrived_ = 0;          // ranks deposited in the current round
  int inside_ = 0;           // callers waiting in a round
  bool aborted_ = false;
  Request request_;            // the current round's, from its first arrival
  int first_rank_ = -1;        // who set request_
  std::string problem_;        // the current round's first disagreement, if any
  std::string ended_problem_;  // the last ended round's: why it queued nothing
  std::vector<Tensor> bufs_;   // per rank, for the current round
  std::vector<Stream*> streams_;
};

}  // namespace fanout::parallel
