#include "apps/presentation/device_peak.h"

namespace fanout::presentation {

nlohmann::json device_peak_json(const DevicePeak& p) {
  nlohmann::json j = {{"device", p.device}, {"bytes", p.peak_bytes}};
  for (int k = 0; k < kNumMemTags; ++k) j[mem_tag_name(static_cast<MemTag>(k))] = p.by_tag[k];
  return j;
}

DevicePeak device_peak_from_json(const nlohmann::json& j) {
  DevicePeak p;
  p.device = j.at("device").get<std::string>();
  p.peak_bytes = j.at("bytes").get<size_t>();
  for (int k = 0; k < kNumMemTags; ++k) p.by_tag[k] = j.value(mem_tag_name(MemTag(k)), size_t{0});
  return p;
}

std::vector<DevicePeak> device_peaks(const std::vector<Device>& devices) {
  return device_peaks_above(devices, std::vector<AllocatorStats>(devices.size()));
}

std::vector<DevicePeak> device_peaks_above(const std::vector<Device>& devices,
                                           const std::vector<AllocatorStats>& before) {
  std::vector<DevicePeak> out;
  auto above = [](const MemStats& now, const MemStats& then) {
    return now.peak > then.live ? now.peak - then.live : size_t{0};
  };
  for (size_t i = 0; i < devices.size(); ++i) {
    AllocatorStats now = allocator_for(devices[i]).stats();
    DevicePeak d;
    d.device = devices[i].str();
    d.peak_bytes = above(now.total, before[i].total);
    for (int k = 0; k < kNumMemTags; ++k) d.by_tag[k] = above(now.by_tag[k], before[i].by_tag[k]);
    out.push_back(d);
  }
  return out;
}

}  // namespace fanout::presentation
