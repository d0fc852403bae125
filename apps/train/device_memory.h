#pragma once
// `--device-memory SIZE`: a cap on every device's live bytes, so CPU devices can
// stand for GPUs of a given size (and a CUDA device can act as a smaller card).
// The flag's text is parsed here; the cap itself is Allocator::set_capacity, and an
// allocation past it fails with one line naming the device and what it allocated.

#include <cstddef>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace fanout::train {

// The largest size parse_byte_size accepts: 1 PiB.
constexpr size_t kMaxByteSize = size_t{1} << 50;

// The help text shared by every command that takes --device-memory.
extern const char* const kDeviceMemoryHelp;

// A positive byte count from "512MiB", "1.5GiB", "2GB", "800M", "64KiB" or
// "1048576": a decimal number (a fraction allowed, no exponent) and an optional
// unit, case-insensitive, with or without a space between. Binary units are powers
// of 1024: K, KiB, M, MiB, G, GiB, T, TiB, P, PiB (bare letters are binary, as in
// `docker --memory`); decimal ones powers of 1000: KB, MB, GB, TB, PB; B or no
// unit is bytes. A fraction of a byte is dropped. Throws fanout::Error naming
// `flag` and the text for an empty, negative, zero, malformed value or one past
// kMaxByteSize ("--device-memory: '0' is zero: give a positive size, ...").
size_t parse_byte_size(const std::string& text, const std::string& flag);

// The same check for a CLI validator: "" when `text` is a size (stored in
// *bytes_out when given), else why not, without the "FLAG: " prefix.
std::string byte_size_problem(const std::string& text, const std::string& flag,
                              size_t* bytes_out = nullptr);

// Caps the live bytes of every device in `devices` at `bytes` (0: no cap). A CUDA
// device refuses a cap above the card's own memory.
void apply_device_memory(size_t bytes, const std::vector<Device>& devices);

}  // namespace fanout::train
