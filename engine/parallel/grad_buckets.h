#pragma once
// GradBuckets (--overlap): the flat gradient buffer cut into contiguous buckets
// of --bucket-mb, counted from the top of the buffer because backward finishes
// the last layers first. Each replica's backward reports finished ranges; once
// every replica has finished a bucket, the last one to get there launches the
// bucket's reduction on the comm streams, while backward goes on computing the
// buckets below it — DDP's overlap, across devices of one process.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/core/stream.h"

namespace fanout::parallel {

class GradBuckets {
 public:
  // launch(begin, end) queues the bucket's collective on the comm streams; it is
  // called with the bucket's compute-stream events already waited on.
  GradBuckets(int64_t total, double bucket_mb, int replicas);
  // One bucket per [cuts[k], cuts[k+1]) (ascending cuts: from 0 to the total,
  // or a pipeline stage's range): zero2/zero3 reduce whole units.
  GradBuckets(const std::vector<int64_t>& cuts, int replicas);

  int64_t count() const { return static_cast<int64_t>(lo_.size()); }
  std::pair<int64_t, int64_t> bucket(int64_t k) const { return {lo_[k], hi_[k]}; }

  // A new step's backward: `active[r]` replicas will report ranges.
  void begin(const std::vector<bool>& active, std::vector<Stream*> compute,
             std::vector<Stream*> comm, std::function<void(int64_t begin, int64_t end)> launch);
  // Replica r's gradients in [begin, end) are queued (ranges come top-down).
  // Ignored unless armed by begin().
  void on_ready(int r, int64_t begin, int64_t end);
  // Stop reacting to on_ready (after the step, or after a failure).
  void disarm();
  // True once every bucket was launched.
  bool all_launched() const { return launched_.load() == count(); }

 private:
  void mark(int r, int64_t k);
  std::vector<int64_t> lo_, hi_;  // bucket k = [lo_[k], hi_[k]), k = 0 is the top
  int replicas_;
  std::vector<Stream*> compute_, comm_;
  std::function<void(int64_t, int64_t)> launch_;
  std::vector<int64_t> watermark_, next_;                    // per replica
  std::vector<std::vector<std::shared_ptr<Event>>> events_;  // [replica][bucket]
  std::vector<int> ready_count_;
  int needed_ = 0;
  bool armed_ = false;
  std::atomic<int64_t> launched_{0};
  std::mutex mu_;
};

}  // namespace fanout::parallel
