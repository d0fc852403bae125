#include "engine/core/device.h"

#include <algorithm>
#include <charconv>

#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"

namespace fanout {

namespace {
constexpr int kMaxDeviceIndex = 1023;
// Each entry is a replica with its own threads, streams and allocator: a list past
// this is a mistake, not a machine (the largest GPU nodes have 16).
constexpr size_t kMaxDevices = 64;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

std::string Device::str() const {
  std::string name = is_cpu() ? "cpu" : "cuda";
  return is_bare() ? name : name + ":" + std::to_string(index);
}

Device device_parse(std::string_view text) {
  std::string_view t = trim(text);
  auto bad = [&](const char* why) {
    detail::throw_error(detail::str_cat("bad device '", std::string(text), "': ", why,
                                        " (expected cpu:N or cuda:N, e.g. cpu:0,cpu:1)"));
  };
  if (t.empty()) bad("empty entry");
  size_t colon = t.find(':');
  std::string_view kind = t.substr(0, colon);
  Device d;
  if (kind == "cpu") {
    d.kind = DeviceKind::cpu;
  } else if (kind == "cuda") {
    d.kind = DeviceKind::cuda;
  } else {
    bad("unknown device kind");
  }
  if (colon == std::string_view::npos) {
    d.index = -1;
    return d;
  }
  std::string_view idx = t.substr(colon + 1);
  if (idx.empty()) bad("missing index after ':'");
  int value = -1;
  auto [end, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), value);
  if (ec != std::errc() || end != idx.data() + idx.size())
    bad("index is not a non-negative integer");
  if (value < 0) bad("index is not a non-negative integer");
  if (value > kMaxDeviceIndex) bad("index too large");
  d.index = value;
  return d;
}

std::vector<Device> devices_parse(std::string_view list) {
  std::string_view t = trim(list);
  FANOUT_CHECK(!t.empty(), "bad device list: empty (expected e.g. cpu:0,cpu:1 or auto)");
  if (t == "auto") {
    int n = cuda_device_count();
    if (n == 0) return {cpu_device(0)};
    std::vector<Device> out;
    for (int i = 0; i < n; ++i) out.push_back(cuda_device(i));
    return out;
  }
  std::vector<Device> out;
  size_t start = 0;
  while (true) {
    size_t comma = t.find(',', start);
    std::string_view entry =
        t.substr(start, comma == std::string_view::npos ? t.npos : comma - start);
    FANOUT_CHECK(!trim(entry).empty(), "bad device list '", std::string(list),
                 "': empty entry at position ", out.size() + 1);
    FANOUT_CHECK(out.size() < kMaxDevices, "bad device list: more than ", kMaxDevices,
                 " entries (one process drives at most ", kMaxDevices, " devices)");
    out.push_back(device_parse(entry));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  bool any_bare = std::any_of(out.begin(), out.end(), [](const Device& d) { return d.is_bare(); });
  FANOUT_CHECK(!(any_bare && out.size() > 1), "bad device list '", std::string(list),
               "': a bare kind (cpu or cuda) must stand alone");
  // One process drives one kind: copies between a CPU and a CUDA replica are not supported.
  bool mixed =
      std::any_of(out.begin(), out.end(), [&](const Device& d) { return d.kind != out[0].kind; });
  FANOUT_CHECK(!mixed, "bad device list '", std::string(list),
               "': all devices must be of one kind (cpu or cuda)");
  return out;
}

void devices_check_available(const std::vector<Device>& devices) {
  int n = -1;
  for (const Device& d : devices) {
    if (!d.is_cuda()) continue;
    if (n < 0) n = cuda_device_count();
    if (n == 0) {
      detail::throw_error(
          detail::str_cat(d.str(), " is not available: ", cuda_unavailable_reason()));
    }
    FANOUT_CHECK(d.is_bare() || d.index < n, d.str(), " is not available: this machine has ", n,
                 " CUDA device", n == 1 ? "" : "s", " (cuda:0..cuda:", n - 1, ")");
  }
}

std::string devices_str(const std::vector<Device>& devices) {
  std::string out;
  for (const Device& d : devices) out += (out.empty() ? "" : ",") + d.str();
  return out;
}

Device device_resolve(Device device, int local_rank) {
  if (device.is_bare()) device.index = local_rank;
  return device;
}

}  // namespace fanout
