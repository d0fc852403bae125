#pragma once
// oneTBB loops that cost nothing on a one-thread CPU device. Kernels run inside
// their stream's arena (Note [CPU device compute]); with one thread there,
// tbb::parallel_for still splits and balances ranges, which cost several percent
// of a training step. These run the loop directly when the arena has one thread.

#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace fanout::ops::cpu {

inline bool single_threaded() {
  return tbb::this_task_arena::max_concurrency() <= 1;
}

// f(i) for every i in [first, last).
template <typename F>
void parallel_for_index(int64_t first, int64_t last, const F& f) {
  if (single_threaded()) {
    for (int64_t i = first; i < last; ++i) f(i);
    return;
  }
  tbb::parallel_for(first, last, f);
}

// f(range) over sub-ranges of `range` (the whole range at once when single-threaded).
template <typename F>
void parallel_for_blocked(const tbb::blocked_range<int64_t>& range, const F& f) {
  if (single_threaded()) {
    f(range);
    return;
  }
  tbb::parallel_for(range, f);
}

}  // namespace fanout::ops::cpu
