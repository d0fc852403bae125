#include "engine/core/op_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"

namespace fanout {

namespace {

// One op's span: CUDA timing events, or the clock readings of a CPU stream's
// markers (written by the stream's worker, read once both have run).
struct Span {
  OpClass cls = OpClass::gemm;
  const char* name = "";
  void* cuda_begin = nullptr;
  void* cuda_end = nullptr;
  double cpu_begin = 0, cpu_end = 0;
  bool cpu = false, cpu_done = false;
  int device = -1;  // CUDA
};

struct Profile {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::condition_variable done;
  std::vector<Span> spans;
  // Timing events kept for the next profile, by device: creating them inside the
  // profiled work would add host time between the ops it measures.
  std::vector<std::pair<int, void*>> free_events;
};

Profile& profile() {
  static auto* p = new Profile();  // never destroyed: scopes may close during exit
  return *p;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Both with the profile's lock held.
void* acquire_event(Profile& p, int device) {
  for (size_t i = p.free_events.size(); i-- > 0;) {
    if (p.free_events[i].first != device) continue;
    void* e = p.free_events[i].second;
    p.free_events.erase(p.free_events.begin() + static_cast<std::ptrdiff_t>(i));
    return e;
  }
  return cuda_timing_event_create(device);
}

void release_events(Profile& p) {
  for (Span& s : p.spans) {
    if (s.cuda_begin) p.free_events.emplace_back(s.device, s.cuda_begin);
    if (s.cuda_end) p.free_events.emplace_back(s.device, s.cuda_end);
  }
  p.spans.clear();
}

}  // namespace

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::gemm:
      return "GEMM";
    case OpClass::attention:
      return "attention";
    case OpClass::loss:
      return "loss";
    case OpClass::elementwise:
      return "element-wise";
    case OpClass::optimizer:
      return "optimizer";
  }
  return "?";
}

double OpTimes::total() const {
  double t = 0;
  for (double s : seconds) t += s;
  return t;
}

void op_profile_start() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  release_events(p);
  p.on = true;
}

bool op_profile_enabled() {
  return profile().on.load(std::memory_order_relaxed);
}

OpTimes op_profile_stop() {
  Profile& p = profile();
  std::unique_lock<std::mutex> lock(p.mu);
  p.on = false;
  OpTimes t;
  for (Span& s : p.spans) {
    double secs = 0;
    if (s.cpu) {
      p.done.wait(lock, [&] { return s.cpu_done; });
      secs = s.cpu_end - s.cpu_begin;
    } else {
      secs = cuda_event_elapsed_ms(s.cuda_begin, s.cuda_end) / 1e3;
    }
    t.seconds[static_cast<int>(s.cls)] += secs;
    ++t.ops;
    auto same = [&](const OpTime& o) { return o.name == s.name && o.cls == s.cls; };
    auto it = std::find_if(t.by_op.begin(), t.by_op.end(), same);
    if (it == t.by_op.end()) it = t.by_op.insert(t.by_op.end(), OpTime{s.name, s.cls, 0, 0});
    it->seconds += secs;
    ++it->count;
  }
  release_events(p);
  std::stable_sort(t.by_op.begin(), t.by_op.end(),
                   [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return t;
}

OpScope::OpScope(Stream& stream, OpClass c, const char* op) {
  Profile& p = profile();
  if (!p.on.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.on) return;
  Span s;
  s.cls = c;
  s.name = op ? op : "";
  const int index = static_cast<int>(p.spans.size());
  if (stream.device().is_cuda()) {
    s.device = stream.device().index;
    s.cuda_begin = acquire_event(p, s.device);
    s.cuda_end = acquire_event(p, s.device);
    cuda_event_record(s.cuda_begin, stream.cuda_handle());
  } else {
    s.cpu = true;
    stream.enqueue_marker([index] {
      Profile& q = profile();
      std::lock_guard<std::mutex> l(q.mu);
      if (index < static_cast<int>(q.spans.size())) q.spans[index].cpu_begin = now_s();
    });
  }
  p.spans.push_back(s);
  stream_ = &stream;
  span_ = index;
}

OpScope::~OpScope() {
  if (!stream_) return;
  Profile& p = profile();
  try {
    std::lock_guard<std::mutex> lock(p.mu);
    if (span_ >= static_cast<int>(p.spans.size())) return;  // a newer profile cleared it
    Span& s = p.spans[span_];
    if (!s.cpu) {
      cuda_event_record(s.cuda_end, stream_->cuda_handle());
      return;
    }
    const int index = span_;
    stream_->enqueue_marker([index] {
      Profile& q = profile();
      {
        std::lock_guard<std::mutex> l(q.mu);
        if (index >= static_cast<int>(q.spans.size())) return;
        q.spans[index].cpu_end = now_s();
        q.spans[index].cpu_done = true;
      }
      q.done.notify_all();
    });
  } catch (...) {
    // A destructor never throws; a failed record shows at the stream's next synchronize.
  }
}

}  // namespace fanout
