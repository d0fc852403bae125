#include "engine/core/cpu_device.h"

#include <cstdlib>
#include <string>

namespace fanout {

int cpu_threads_per_device() {
  static const int threads = [] {
    const char* env = std::getenv("FANOUT_CPU_THREADS");
    if (env == nullptr) return 1;
    try {
      int n = std::stoi(env);
      return n > 0 ? n : 1;
    } catch (...) {
      return 1;
    }
  }();
  return threads;
}

}  // namespace fanout
