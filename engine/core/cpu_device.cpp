#include "engine/core/cpu_device.h"

#include <cstdlib>
#include <string>

#include "engine/core/number_text.h"

namespace fanout {

int cpu_threads_per_device() {
  // Read once; a malformed value throws here, and again at the next call.
  static const int threads = [] {
    const char* env = std::getenv("FANOUT_CPU_THREADS");
    if (env == nullptr) return 1;
    return static_cast<int>(
        parse_whole_number(env, 1, kMaxCpuThreads, "environment variable FANOUT_CPU_THREADS"));
  }();
  return threads;
}

}  // namespace fanout
