#pragma once
// Note [CPU device compute]: a CPU device is a fixed share of the machine, like a
// GPU is a fixed piece of hardware: its kernels run inside its own oneTBB arena of
// cpu_threads_per_device() threads (default 1, FANOUT_CPU_THREADS overrides), and
// GEMMs are single-threaded. Using more cores means using more devices
// (cpu:0,cpu:1,...) — which is what data parallelism is for — and a benchmark of
// N devices against one compares N shares against one share.

#include <tbb/task_arena.h>

namespace fanout {

// FANOUT_CPU_THREADS (a positive integer), else 1. Read once.
int cpu_threads_per_device();

// The arena of cpu:index (created on first use, never destroyed).
tbb::task_arena& cpu_device_arena(int index);

}  // namespace fanout
