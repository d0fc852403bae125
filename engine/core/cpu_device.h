#pragma once
// Note [CPU device compute]: a CPU device is a fixed share of the machine, like a
// GPU is a fixed piece of hardware: its kernels run inside oneTBB arenas of
// cpu_threads_per_device() threads (default 1, FANOUT_CPU_THREADS overrides), and
// GEMMs are single-threaded. Each stream owns its arena, only its own thread ever
// enters it: streams of one device run side by side as a GPU's streams may (an
// arena shared by two entering threads made oneTBB start an extra worker to run
// the second one's kernel, unseen by the thread sanitizer). Using more cores
// means using more devices (cpu:0,cpu:1,...) — which is what data parallelism is
// for — and a benchmark of N devices against one compares N shares against one.

namespace fanout {

// FANOUT_CPU_THREADS's ceiling: more threads than any machine has cores only
// oversubscribes it.
constexpr int kMaxCpuThreads = 1024;

// FANOUT_CPU_THREADS (a whole number in 1..kMaxCpuThreads by fanout's number
// rules), else 1. Read once. Throws fanout::Error naming the variable and its
// text when it is malformed.
int cpu_threads_per_device();

}  // namespace fanout
