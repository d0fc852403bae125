#include "engine/parallel/grad_buckets.h"

#include <algorithm>
#include <cmath>

#include "engine/core/check.h"

namespace fanout::parallel {

GradBuckets::GradBuckets(int64_t total, double bucket_mb, int replicas) : replicas_(replicas) {
  FANOUT_CHECK(std::isfinite(bucket_mb) && bucket_mb > 0,
               "--bucket-mb must be a positive finite number, got ", bucket_mb);
  // Elements per bucket; a bucket past the whole buffer is one bucket (and the
  // comparison in double keeps the cast below defined for any size).
  const double elements = bucket_mb * 1024 * 1024 / 4;
  const int64_t size = elements >= static_cast<double>(std::max<int64_t>(total, 1))
                           ? std::max<int64_t>(total, 1)
                           : std::max<int64_t>(1, static_cast<int64_t>(elements));
  for (int64_t hi = total; hi > 0; hi -= size) {
    hi_.push_back(hi);
    lo_.push_back(std::max<int64_t>(0, hi - size));
  }
}

GradBuckets::GradBuckets(const std::vector<int64_t>& cuts, int replicas) : replicas_(replicas) {
  FANOUT_ASSERT(cuts.size() >= 2 && cuts.front() >= 0, "bucket cuts need a start and an end");
  for (size_t k = cuts.size() - 1; k > 0; --k) {
    FANOUT_ASSERT(cuts[k - 1] < cuts[k], "bucket cuts must ascend");
    hi_.push_back(cuts[k]);
    lo_.push_back(cuts[k - 1]);
  }
}

void GradBuckets::begin(const std::vector<bool>& active, std::vector<Stream*> compute,
                        std::vector<Stream*> comm,
                        std::function<void(int64_t begin, int64_t end)> launch) {
  std::lock_guard<std::mutex> lock(mu_);
  compute_ = std::move(compute);
  comm_ = std::move(comm);
  launch_ = std::move(launch);
  int64_t K = count();
  watermark_.assign(replicas_, hi_.empty() ? 0 : hi_[0]);
  next_.assign(replicas_, 0);
  events_.assign(replicas_, std::vector<std::shared_ptr<Event>>(K));
  ready_count_.assign(K, 0);
  launched_ = 0;
  needed_ = replicas_;
  armed_ = true;
  // Idle replicas contribute zero gradients that are already queued: every bucket
  // of theirs is ready now.
  for (int r = 0; r < replicas_; ++r) {
    if (active[r]) continue;
    for (int64_t k = 0; k < K; ++k) mark(r, k);
  }
}

void GradBuckets::on_ready(int r, int64_t begin, int64_t /*end*/) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_) return;
  watermark_[r] = std::min(watermark_[r], begin);
  while (next_[r] < count() && watermark_[r] <= lo_[next_[r]]) mark(r, next_[r]++);
}

void GradBuckets::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

// Called with mu_ held.
void GradBuckets::mark(int r, int64_t k) {
  auto e = std::make_shared<Event>();
  e->record(*compute_[r]);
  events_[r][k] = e;
  if (++ready_count_[k] < needed_) return;
  // Every replica has bucket k queued: the comm streams wait for all of them.
  for (int q = 0; q < replicas_; ++q) events_[q][k]->wait(*comm_[q]);
  launch_(lo_[k], hi_[k]);
  ++launched_;
}

}  // namespace fanout::parallel
