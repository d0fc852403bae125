// Stream capture and StreamGraph (engine/core/stream.h).

#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/stream.h"
#include "engine/core/worker.h"

namespace fanout {

// Note [Stream graphs]
// ~~~~~~~~~~~~~~~~~~~~
// A small model's step is hundreds of short kernels, and on a GPU the host's
// launches, not the kernels, can set its pace. A graph records a stretch of one
// stream's work once and replays it with a single launch: on CUDA devices a CUDA
// graph (stream capture), on CPU devices the closures themselves, queued again
// in order as one task. Replaying repeats the work exactly as recorded: the same
// kernels, on the same buffers, with the arguments the host passed then. So the
// host code that runs while recording must not depend on anything that changes
// between replays except the contents of device buffers, and what the work uses
// must stay where it is:
//
// - the host must not wait for the stream (a recording has not run), nor record
//   or wait for events on it: these throw, and the recording fails;
// - device memory allocated or freed by the recording thread on the stream's
//   device would be gone or reused at the next replay: allocations are refused,
//   frees held until the recording ends (engine/core/allocator.h), and either
//   fails the recording, which end_capture then reports;
// - whoever replays keys the graph on everything the host passed (shapes,
//   scalars, buffer addresses) and records again when the key changes.
//
// CPU recordings obey the same rules as CUDA's, so that the CPU suite finds the
// host code that would break a CUDA recording. CUDA adds its own refusals (an
// API call that is not allowed while capturing, from cuBLAS or cuDNN, say); they
// surface as the same failed recording, with CUDA's message. While a CUDA stream
// records, fences of freed memory (Note [CUDA allocation ordering]) pass it by:
// begin_capture waited for its earlier work, and the recording runs nothing.

bool Stream::capturing() const {
  std::lock_guard<std::mutex> lock(capture_mu_);
  return recording_ != nullptr;
}

void Stream::begin_capture() {
  detail::GraphRecording*& mine = detail::graph_recording_of_this_thread();
  FANOUT_ASSERT(mine == nullptr, name_, ": this thread already records a graph");
  auto rec = std::make_unique<detail::GraphRecording>();
  rec->device = device_;
  rec->stream = name_;
  {
    std::lock_guard<std::mutex> lock(capture_mu_);
    FANOUT_ASSERT(recording_ == nullptr, name_, " already records a graph");
  }
  if (cuda_stream_) cuda_stream_begin_capture(cuda_stream_);
  std::lock_guard<std::mutex> lock(capture_mu_);
  if (worker_) recorded_ = std::make_shared<std::vector<Task>>();
  recording_ = std::move(rec);
  mine = recording_.get();
}

bool Stream::record(std::function<void()>& fn, Kind kind) {
  std::lock_guard<std::mutex> lock(capture_mu_);
  if (!recording_) return false;
  recorded_->push_back({std::move(fn), kind});
  return true;
}

void Stream::refuse_while_recording(const char* what) {
  std::lock_guard<std::mutex> lock(capture_mu_);
  if (!recording_) return;
  const std::string why = std::string("it needs ") + what + ", which a recording cannot hold";
  recording_->fail(why);
  detail::throw_error(detail::str_cat(name_, ": a graph is being recorded here, and ", why));
}

// The recording is over: this thread records nothing more, and what it freed
// meanwhile is freed now.
void Stream::end_recording() noexcept {
  std::unique_ptr<detail::GraphRecording> rec;
  {
    std::lock_guard<std::mutex> lock(capture_mu_);
    rec = std::move(recording_);
    recorded_.reset();
  }
  if (!rec) return;
  detail::GraphRecording*& mine = detail::graph_recording_of_this_thread();
  if (mine != rec.get()) {
    // Ended on another thread than the one recording (a stream destroyed under
    // it): that thread still points here, so this leaks rather than dangles.
    rec.release();
    return;
  }
  mine = nullptr;
  detail::graph_recording_release(*rec);
}

std::unique_ptr<StreamGraph> Stream::end_capture() {
  std::string failure;
  std::shared_ptr<std::vector<Task>> tasks;
  {
    std::lock_guard<std::mutex> lock(capture_mu_);
    FANOUT_ASSERT(recording_ != nullptr, name_, ": end_capture without begin_capture");
    FANOUT_ASSERT(recording_.get() == detail::graph_recording_of_this_thread(), name_,
                  ": end_capture on another thread than begin_capture's");
    failure = recording_->failure();
    tasks = recorded_;
  }
  std::unique_ptr<StreamGraph> graph(new StreamGraph(device_));
  if (cuda_stream_) {
    void* exec = nullptr;
    try {
      exec = cuda_stream_end_capture(cuda_stream_);
    } catch (const Error& e) {
      end_recording();
      if (!failure.empty()) throw Error(name_ + ": the graph was not recorded: " + failure);
      throw;
    }
    graph->exec_ = exec;  // owned from here: a throw below destroys it
    end_recording();
    if (!failure.empty()) throw Error(name_ + ": the graph was not recorded: " + failure);
    graph->done_ = cuda_event_create(device_.index);
    return graph;
  }
  end_recording();
  if (!failure.empty()) throw Error(name_ + ": the graph was not recorded: " + failure);
  graph->tasks_ = std::move(tasks);
  return graph;
}

void Stream::abort_capture() noexcept {
  bool cuda = false;
  {
    std::lock_guard<std::mutex> lock(capture_mu_);
    if (!recording_) return;
    cuda = cuda_stream_ != nullptr;
  }
  if (cuda) cuda_stream_abort_capture(cuda_stream_);
  end_recording();
}

// --- StreamGraph ------------------------------------------------------------

StreamGraph::~StreamGraph() {
  if (done_) {
    try {
      cuda_event_synchronize(done_);  // a launch still queued finishes first
    } catch (...) {                   // a failed device: its queue is gone with it
    }
    cuda_event_destroy(done_);
  }
  if (exec_) cuda_graph_destroy(exec_);
}

void StreamGraph::launch(Stream& stream) {
  FANOUT_ASSERT(stream.device() == device_, "a graph recorded on ", device_.str(), " launched on ",
                stream.name());
  stream.refuse_while_recording("a graph launched into it");
  if (exec_) {
    cuda_graph_launch(exec_, stream.cuda_handle());
    cuda_event_record(done_, stream.cuda_handle());
    return;
  }
  // One task: each closure in turn, as the stream would run it (a failed one
  // skips the rest but the markers, Note [Sticky stream errors]).
  stream.worker_->post([s = &stream, tasks = tasks_] {
    for (const Stream::Task& t : *tasks) s->run(t.fn, t.kind);
  });
}

}  // namespace fanout
