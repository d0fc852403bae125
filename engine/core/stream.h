#pragma once
// Stream: an in-order queue of work on one device. CPU streams run closures on
// their own worker thread (so a compute and a comm stream really overlap); CUDA
// streams wrap cudaStream_t. Event: a point in a stream's queue that another
// stream (or the host) can wait for — the only way work crosses streams.
//
// Errors (Note [Sticky stream errors]): a closure that throws marks its CPU stream
// failed; later closures are skipped (event records still run, so no waiter hangs)
// until synchronize() rethrows the error, naming the stream, and clears it.

#include <exception>
#include <functional>
#include <memory>

#include <tbb/task_arena.h>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace fanout {

class Worker;
class StreamGraph;
namespace detail {
struct GraphRecording;
}

class Stream {
 public:
  Stream(Device device, std::string name);  // name: a trace lane, e.g. "cpu:0 compute"
  ~Stream();                                // waits for queued work; never throws
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device device() const { return device_; }
  const std::string& name() const { return name_; }

  // CPU streams: run fn after everything queued before it, in the stream's
  // compute arena of the device's threads (Note [CPU device compute]).
  void enqueue(std::function<void()> fn);
  // The same for host work that blocks without computing (a network collective):
  // it runs outside the arena, so the device's kernels on other streams go on.
  void enqueue_blocking(std::function<void()> fn);
  // Waits for all queued work; rethrows the first error since the last synchronize.
  void synchronize();
  // cudaStream_t of a CUDA stream (nullptr for CPU streams).
  void* cuda_handle() const { return cuda_stream_; }

  // Internal to Event, StreamSpan and OpScope: a closure that runs even on a failed
  // stream.
  void enqueue_marker(std::function<void()> fn);

  // Note [Stream graphs] (stream_graph.cpp): between begin_capture and
  // end_capture, the work this thread queues here is recorded, not run (CUDA:
  // stream capture; CPU: the closures are kept), and the graph end_capture
  // returns replays it with one launch. While recording, synchronize(), events on
  // this stream and device memory this thread allocates or frees fail the
  // recording: those calls throw, or end_capture does, saying why. abort_capture
  // drops a recording (after a failure, say); never throws. One thread begins,
  // ends or aborts a recording, and records one at a time.
  void begin_capture();
  std::unique_ptr<StreamGraph> end_capture();
  void abort_capture() noexcept;
  bool capturing() const;

 private:
  friend class StreamGraph;
  friend class Event;
  enum class Kind { compute, blocking, marker };
  struct Task {
    std::function<void()> fn;
    Kind kind;
  };
  void run(const std::function<void()>& fn, Kind kind);
  // CPU: keeps fn when recording; returns false when the stream is not.
  bool record(std::function<void()>& fn, Kind kind);
  // Throws (and fails the recording) when this stream records: `what` cannot be.
  void refuse_while_recording(const char* what);
  void end_recording() noexcept;

  Device device_;
  std::string name_;
  std::unique_ptr<Worker> worker_;          // CPU
  std::unique_ptr<tbb::task_arena> arena_;  // CPU: where its kernels run
  void* cuda_stream_ = nullptr;             // CUDA
  std::mutex error_mu_;
  std::exception_ptr error_;
  // The recording in progress (Note [Stream graphs]); CPU: its closures.
  mutable std::mutex capture_mu_;
  std::unique_ptr<detail::GraphRecording> recording_;
  std::shared_ptr<std::vector<Task>> recorded_;
};

// A recorded stretch of one stream's work (Stream::end_capture). launch() queues
// all of it again on `stream`, a stream of the same device: the same kernels on
// the same buffers, with the arguments they had when recorded. The graph may be
// destroyed at any time; a launch still queued finishes first.
class StreamGraph {
 public:
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  void launch(Stream& stream);
  Device device() const { return device_; }
  // CPU: the closures recorded (0 for CUDA graphs).
  size_t size() const { return tasks_ ? tasks_->size() : 0; }

 private:
  friend class Stream;
  explicit StreamGraph(Device device) : device_(device) {}
  Device device_;
  std::shared_ptr<const std::vector<Stream::Task>> tasks_;  // CPU
  void* exec_ = nullptr;                                    // CUDA: cudaGraphExec_t
  void* done_ = nullptr;                                    // CUDA: an event after the last launch
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the current end of `stream`'s queue.
  void record(Stream& stream);
  // Work queued on `stream` after this call starts only once the last record()ed point ran.
  void wait(Stream& stream);
  // The host waits for the last record()ed point.
  void synchronize();
  bool query();

 private:
  struct CpuState;
  std::shared_ptr<CpuState> cpu_;
  void* cuda_event_ = nullptr;
  int cuda_device_ = -1;
};

// A span on the stream's trace lane, timed when the stream actually runs it
// (CPU streams), or on the host (CUDA streams).
class StreamSpan {
 public:
  StreamSpan(Stream& stream, std::string name);
  ~StreamSpan();
  StreamSpan(const StreamSpan&) = delete;
  StreamSpan& operator=(const StreamSpan&) = delete;

 private:
  Stream& stream_;
  std::shared_ptr<int64_t> begin_us_;
  std::string name_;
  bool active_ = false;
};

}  // namespace fanout
