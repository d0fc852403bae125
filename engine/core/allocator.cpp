#include "engine/core/allocator.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>

#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"

namespace fanout {

namespace {

constexpr size_t kCpuAlignment = 64;

class CpuAllocator final : public Allocator {
 public:
  using Allocator::Allocator;

 protected:
  void* raw_allocate(size_t bytes) override {
    size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
    FANOUT_CHECK(p != nullptr, "out of memory on ", device().str(), ": could not allocate ",
                 bytes_str(bytes));
    return p;
  }
  void raw_deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
};

// Note [CUDA allocation ordering]: allocations come from the device's default
// memory pool through cudaMallocAsync on the legacy stream, synchronised before the
// pointer is handed out, so any stream may use it at once. Persistent buffers
// (parameters, gradients, the activation arena) make allocation rare in steady
// state; frees wait for the device so that no queued kernel can still touch them.
class CudaAllocator final : public Allocator {
 public:
  using Allocator::Allocator;

 protected:
  void* raw_allocate(size_t bytes) override {
    void* p = cuda_malloc_async(bytes == 0 ? 256 : bytes, device().index, nullptr);
    cuda_stream_synchronize(nullptr);
    return p;
  }
  void raw_deallocate(void* ptr, size_t) noexcept override {
    cuda_device_synchronize(device().index);
    cuda_free_async(ptr, device().index, nullptr);
  }
};

}  // namespace

const char* mem_tag_name(MemTag tag) {
  switch (tag) {
    case MemTag::other:
      return "other";
    case MemTag::params:
      return "params";
    case MemTag::grads:
      return "grads";
    case MemTag::optimizer:
      return "optimizer";
    case MemTag::activations:
      return "activations";
    case MemTag::comm:
      return "comm";
    case MemTag::data:
      return "data";
  }
  return "?";
}

void Allocator::Counter::add(size_t bytes) {
  size_t now = live.fetch_add(bytes) + bytes;
  size_t prev = peak.load();
  while (now > prev && !peak.compare_exchange_weak(prev, now)) {
  }
}

void* Allocator::allocate(size_t bytes, MemTag tag) {
  void* p = raw_allocate(bytes);
  total_.add(bytes);
  tags_[static_cast<int>(tag)].add(bytes);
  num_allocs_.fetch_add(1);
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes, MemTag tag) noexcept {
  if (ptr == nullptr) return;
  raw_deallocate(ptr, bytes);
  total_.sub(bytes);
  tags_[static_cast<int>(tag)].sub(bytes);
}

AllocatorStats Allocator::stats() const {
  AllocatorStats s;
  s.total = {total_.live.load(), total_.peak.load()};
  for (int i = 0; i < kNumMemTags; ++i) s.by_tag[i] = {tags_[i].live.load(), tags_[i].peak.load()};
  s.num_allocs = num_allocs_.load();
  return s;
}

void Allocator::reset_peak() {
  total_.peak.store(total_.live.load());
  for (Counter& c : tags_) c.peak.store(c.live.load());
}

Allocator& allocator_for(Device device) {
  FANOUT_ASSERT(!device.is_bare(), "allocator for unresolved device ", device.str());
  static std::mutex mu;
  static auto* registry = new std::map<std::pair<int, int>, std::unique_ptr<Allocator>>();
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  auto it = registry->find(key);
  if (it == registry->end()) {
    std::unique_ptr<Allocator> a;
    if (device.is_cpu()) {
      a = std::make_unique<CpuAllocator>(device);
    } else {
      a = std::make_unique<CudaAllocator>(device);
    }
    it = registry->emplace(key, std::move(a)).first;
  }
  return *it->second;
}

std::string bytes_str(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace fanout
