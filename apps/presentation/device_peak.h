#pragma once
// Peak bytes of one device, in total and per MemTag: what bench measures over a
// mode's timed steps and the walkthrough over a mode's narrated run, and what
// their memory tables draw. The kinds peak at different moments, so they may add
// up to more than the total.

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/allocator.h"
#include "engine/core/device.h"

namespace fanout::presentation {

struct DevicePeak {
  std::string device;
  size_t peak_bytes = 0;
  std::array<size_t, kNumMemTags> by_tag{};
  size_t tag(MemTag t) const { return by_tag[static_cast<int>(t)]; }
};

// {"device", "bytes" (the total), and one key per MemTag: "params", "grads", ...};
// from_json reads the same (a file without the kinds leaves them 0).
nlohmann::json device_peak_json(const DevicePeak& p);
DevicePeak device_peak_from_json(const nlohmann::json& j);

// Each device's peaks since they were last reset, as they stand.
std::vector<DevicePeak> device_peaks(const std::vector<Device>& devices);
// The same above what each device held in `before` (its allocator stats taken then).
std::vector<DevicePeak> device_peaks_above(const std::vector<Device>& devices,
                                           const std::vector<AllocatorStats>& before);

}  // namespace fanout::presentation
