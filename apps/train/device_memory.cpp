#include "apps/train/device_memory.h"

#include <cctype>
#include <cstdint>

#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"

namespace fanout::train {

const char* const kDeviceMemoryHelp =
    "Cap each device's live memory at SIZE, so CPU devices stand for GPUs of that size (on "
    "CUDA devices: a cap below the card's); an allocation past it stops with 'out of memory "
    "on DEVICE'. SIZE: 512MiB, 1.5GiB, 2GB, 800M, 1048576; K/KiB, M/MiB, G/GiB, T/TiB are "
    "powers of 1024, KB, MB, GB, TB powers of 1000, no unit is bytes (default: no cap)";

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Bytes per unit, or 0 for an unknown unit.
uint64_t unit_bytes(const std::string& unit) {
  const std::string u = lower(unit);
  if (u.empty() || u == "b") return 1;
  const std::string prefixes = "kmgtp";
  const size_t p = prefixes.find(u[0]);
  if (p == std::string::npos) return 0;
  uint64_t binary = uint64_t{1} << (10 * (p + 1)), decimal = 1;
  for (size_t i = 0; i <= p; ++i) decimal *= 1000;
  const std::string rest = u.substr(1);
  if (rest.empty() || rest == "ib") return binary;
  if (rest == "b") return decimal;
  return 0;
}

}  // namespace

std::string byte_size_problem(const std::string& text, const std::string& flag, size_t* bytes_out) {
  const std::string form =
      " is not a size: give a number and an optional unit, e.g. 512MiB, 1.5GiB, 2GB or 1048576 "
      "(KiB, MiB, GiB, TiB: powers of 1024; KB, MB, GB, TB: powers of 1000)";
  if (text.empty()) return "an empty value is not a size (e.g. 512MiB or 1.5GiB)";
  const std::string quoted = "'" + text + "'";
  if (text[0] == '-') return quoted + " is negative: give a positive size, e.g. 512MiB";
  // The number: digits, then an optional fraction (kept exactly as digits / 10^n).
  uint64_t whole = 0, frac = 0, frac_scale = 1;
  bool digits = false, whole_too_large = false;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    digits = true;
    if (whole > kMaxByteSize) whole_too_large = true;  // stays past the bound; no overflow
    if (!whole_too_large) whole = whole * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      digits = true;
      if (frac_scale < 1'000'000'000'000'000'000ull) {  // 18 digits: far below one byte
        frac = frac * 10 + static_cast<uint64_t>(text[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (!digits) return quoted + form;
  while (i < text.size() && text[i] == ' ') ++i;
  const uint64_t unit = unit_bytes(text.substr(i));
  if (unit == 0) return quoted + form;
  const std::string too_large = quoted + " is more than 1 PiB, the largest size " + flag + " takes";
  if (whole_too_large || whole > kMaxByteSize / unit) return too_large;
  const unsigned __int128 bytes =
      static_cast<unsigned __int128>(whole) * unit +
      static_cast<unsigned __int128>(frac) * unit / frac_scale;  // a fraction of a byte drops
  if (bytes > kMaxByteSize) return too_large;
  if (whole == 0 && frac == 0) {
    return quoted + " is zero: give a positive size, e.g. 512MiB (leave " + flag +
           " out for no cap)";
  }
  if (bytes == 0) return quoted + " is less than one byte";
  if (bytes_out) *bytes_out = static_cast<size_t>(bytes);
  return "";
}

size_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t bytes = 0;
  const std::string problem = byte_size_problem(text, flag, &bytes);
  FANOUT_CHECK(problem.empty(), flag, ": ", problem);
  return bytes;
}

void apply_device_memory(size_t bytes, const std::vector<Device>& devices) {
  for (const Device& d : devices) {
    if (d.is_cuda() && bytes > 0) {
      const CudaDeviceInfo info = cuda_device_info(d.index);
      FANOUT_CHECK(bytes <= info.total_bytes, "--device-memory ", bytes_str(bytes),
                   " is more than ", d.str(), " has (", info.name, ", ",
                   bytes_str(info.total_bytes), "): give a size up to that");
    }
  }
  for (const Device& d : devices) allocator_for(d).set_capacity(bytes);
}

}  // namespace fanout::train
