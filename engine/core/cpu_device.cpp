#include "engine/core/cpu_device.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
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

tbb::task_arena& cpu_device_arena(int index) {
  static std::mutex mu;
  static auto* arenas = new std::map<int, std::unique_ptr<tbb::task_arena>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& arena = (*arenas)[index];
  if (!arena) arena = std::make_unique<tbb::task_arena>(cpu_threads_per_device(), 1);
  return *arena;
}

}  // namespace fanout
