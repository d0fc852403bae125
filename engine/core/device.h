#pragma once
// Device = kind + index: `cpu:N` (a simulated device with its own allocator and
// streams, first-class everywhere) or `cuda:N`. Parsing is strict: every bad entry
// of a device list is an error that names it. A bare kind (`cpu`, `cuda`) has
// index -1 and is resolved per rank by the multi-process mode.

#include <string>
#include <string_view>
#include <vector>

namespace fanout {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // -1: a bare kind, resolved later (ddp: LOCAL_RANK)

  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool is_bare() const { return index < 0; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

inline Device cpu_device(int index = 0) {
  return {DeviceKind::cpu, index};
}
inline Device cuda_device(int index) {
  return {DeviceKind::cuda, index};
}

// "cpu:0", "cuda:3", "cpu", "cuda". Throws fanout::Error naming the entry otherwise.
Device device_parse(std::string_view text);

// A comma list of devices, or "auto" (every visible GPU, else cpu:0).
// Duplicates are allowed (two replicas on one device). Empty entries and lists
// mixing kinds (cuda:0,cpu:0) are errors.
std::vector<Device> devices_parse(std::string_view list);

// Throws fanout::Error for the first device that does not exist on this machine,
// e.g. "cuda:0 is not available: no CUDA device was found (...)".
void devices_check_available(const std::vector<Device>& devices);

// "cpu:0,cpu:1"
std::string devices_str(const std::vector<Device>& devices);

// Resolves a bare kind to `kind:local_rank`; a concrete device is returned unchanged.
Device device_resolve(Device device, int local_rank);

}  // namespace fanout
