#include "models/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/check.h"

namespace fanout::models {

// The data section is copied to and from memory as is.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit

// Bits per element of every dtype the format defines; F4 and F6 pack several per byte.
int dtype_bits(const std::string& dtype) {
  static const std::map<std::string, int> kBits = {
      {"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
      {"I32", 32},    {"U32", 32}, {"F32", 32}, {"I64", 64},    {"U64", 64},
      {"F64", 64},    {"C64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  auto it = kBits.find(dtype);
  return it == kBits.end() ? 0 : it->second;
}

// IEEE half -> float, exact (every half is a float).
float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else {
    float f = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::string range_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

void read_exact(std::ifstream& in, void* dst, uint64_t bytes, const std::string& path,
                const std::string& what) {
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
  FANOUT_CHECK(in && static_cast<uint64_t>(in.gcount()) == bytes, path, ": short read of ", what,
               " (file truncated or changed while open?)");
}

// Everything about one tensor's entry that does not depend on the other tensors.
SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& v,
                             uint64_t data_size) {
  const std::string where = path + ": tensor '" + name + "'";
  FANOUT_CHECK(v.is_object(), where, ": entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    FANOUT_CHECK(v.contains(key), where, ": missing \"", key, "\"");
  }
  SafetensorsEntry e;
  e.name = name;

  const json& dtype = v.at("dtype");
  FANOUT_CHECK(dtype.is_string(), where, ": \"dtype\" is not a string");
  e.dtype = dtype.get<std::string>();
  const int bits = dtype_bits(e.dtype);
  FANOUT_CHECK(bits > 0, where, ": unknown dtype '", e.dtype, "'");

  // Non-negative JSON integers parse as unsigned, negative ones as signed.
  const json& shape = v.at("shape");
  FANOUT_CHECK(shape.is_array(), where, ": \"shape\" is not an array of integers");
  uint64_t numel = 1;
  bool too_large = false;
  for (const json& d : shape) {
    FANOUT_CHECK(d.is_number_integer(), where, ": \"shape\" is not an array of integers");
    FANOUT_CHECK(d.is_number_unsigned(), where, ": negative dimension in shape ", shape.dump());
    uint64_t n = d.get<uint64_t>();
    too_large |= n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                 __builtin_mul_overflow(numel, n, &numel);
    e.shape.push_back(static_cast<int64_t>(n));
  }
  uint64_t total_bits = 0;
  too_large |= __builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &total_bits);
  FANOUT_CHECK(!too_large, where, ": shape ", shape.dump(), " is too large");
  FANOUT_CHECK(total_bits % 8 == 0, where, ": ", numel, " ", e.dtype,
               " elements do not fill whole bytes");

  const json& offsets = v.at("data_offsets");
  FANOUT_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               where, ": \"data_offsets\" is not [begin, end] of non-negative integers");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  const std::string range = range_str(e.begin, e.end);
  FANOUT_CHECK(e.begin <= e.end, where, ": data_offsets ", range, " have begin > end");
  FANOUT_CHECK(e.end - e.begin == total_bits / 8, where, ": data_offsets ", range, " hold ",
               e.end - e.begin, " bytes but ", e.dtype, " ", shape.dump(), " needs ",
               total_bits / 8);
  FANOUT_CHECK(e.end <= data_size, where, ": data_offsets ", range,
               " run past the end of the data (", data_size, " bytes)");
  return e;
}

// The tensors, sorted by offset, must tile [0, data_size) exactly: no overlap, no hole,
// nothing after the last one.
void check_tiling(const std::string& path, const std::vector<SafetensorsEntry>& sorted,
                  uint64_t data_size) {
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : sorted) {
    FANOUT_CHECK(e.begin >= covered, path, ": tensors '", prev->name, "' ",
                 range_str(prev->begin, prev->end), " and '", e.name, "' ",
                 range_str(e.begin, e.end), " overlap");
    FANOUT_CHECK(e.begin == covered, path, ": hole of ", e.begin - covered,
                 " bytes before tensor '", e.name, "' at data_offsets ", range_str(e.begin, e.end));
    covered = e.end;
    prev = &e;
  }
  FANOUT_CHECK(covered == data_size, path, ": ", data_size - covered,
               " trailing bytes after the last tensor (the data section is ", data_size,
               " bytes, the tensors cover ", covered, ")");
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& v) {
  std::map<std::string, std::string> metadata;
  if (v.is_null()) return metadata;  // the reference reader treats null as absent
  FANOUT_CHECK(v.is_object(), path, ": __metadata__ is not a map of strings to strings (it is ",
               v.type_name(), ")");
  for (const auto& [key, value] : v.items()) {
    FANOUT_CHECK(value.is_string(), path,
                 ": __metadata__ is not a map of strings to strings (value of '", key, "' is ",
                 value.type_name(), ")");
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

}  // namespace

// --- reader -------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  FANOUT_CHECK(!ec, path, ": cannot open: ", ec.message());
  std::ifstream in(path, std::ios::binary);
  FANOUT_CHECK(in, path, ": cannot open: ", std::strerror(errno));
  FANOUT_CHECK(file_size >= 8, path, ": file is ", file_size,
               " bytes, too short for the 8-byte header length");

  unsigned char length_bytes[8];
  read_exact(in, length_bytes, 8, path, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length_bytes[i];
  FANOUT_CHECK(n <= kMaxHeaderBytes, path, ": header length ", n,
               " exceeds the 100 MB limit (not a safetensors file?)");
  FANOUT_CHECK(n <= file_size - 8, path, ": header length ", n, " runs past the end of the file (",
               file_size, " bytes)");
  std::string header(n, '\0');
  read_exact(in, header.data(), n, path, "the header");
  FANOUT_CHECK(n > 0 && header[0] == '{', path,
               ": header does not start with '{' (not a safetensors file?)");

  // nlohmann::json keeps the last of repeated keys; a callback spots the repeat.
  std::set<std::string> names;
  std::string repeated;
  json::parser_callback_t spot_repeats = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && repeated.empty() &&
        !names.insert(parsed.get<std::string>()).second) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  // JSON never holds a raw NUL, but nlohmann's lexer would take one for the end of input.
  const size_t nul = header.find('\0');
  FANOUT_CHECK(nul == std::string::npos, path, ": header is not valid JSON: NUL byte at offset ",
               nul);
  json root;
  try {
    root = json::parse(header, spot_repeats);
  } catch (const json::exception& e) {
    std::string why = e.what();
    if (auto pos = why.find("] "); pos != std::string::npos) why = why.substr(pos + 2);
    FANOUT_CHECK(false, path, ": header is not valid JSON: ", why);
  }
  FANOUT_CHECK(root.is_object(), path, ": header is not a JSON object");
  FANOUT_CHECK(repeated.empty(), path, ": tensor '", repeated, "' appears twice in the header");

  SafetensorsFile file;
  file.path_ = path;
  file.data_start_ = 8 + n;
  const uint64_t data_size = file_size - file.data_start_;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      file.metadata_ = parse_metadata(path, value);
    } else {
      file.entries_.push_back(parse_entry(path, key, value, data_size));
    }
  }
  std::stable_sort(file.entries_.begin(), file.entries_.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  check_tiling(path, file.entries_, data_size);
  for (size_t i = 0; i < file.entries_.size(); ++i) file.index_[file.entries_[i].name] = i;
  return file;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsFile::read_f32(const std::string& name, float* out, int64_t numel) const {
  const SafetensorsEntry* e = find(name);
  FANOUT_CHECK(e != nullptr, path_, ": no tensor '", name, "'");
  const int64_t have = shape_numel(e->shape);
  FANOUT_CHECK(numel == have, path_, ": tensor '", name, "' has ", have, " elements (shape ",
               shape_str(e->shape), "), the caller expects ", numel);
  const bool f32 = e->dtype == "F32", bf16 = e->dtype == "BF16", f16 = e->dtype == "F16";
  FANOUT_CHECK(f32 || bf16 || f16, path_, ": tensor '", name, "' is ", e->dtype,
               "; read_f32 reads F32, BF16 or F16");

  std::ifstream in(path_, std::ios::binary);
  FANOUT_CHECK(in, path_, ": cannot open: ", std::strerror(errno));
  in.seekg(static_cast<std::streamoff>(data_start_ + e->begin));
  const std::string what = "tensor '" + name + "'";
  if (f32) {
    read_exact(in, out, e->end - e->begin, path_, what);
    return;
  }
  // 16-bit sources convert through a bounded buffer, not a second full copy.
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint16_t> buf(static_cast<size_t>(std::min(numel, kChunk)));
  for (int64_t done = 0; done < numel; done += kChunk) {
    const int64_t n = std::min(kChunk, numel - done);
    read_exact(in, buf.data(), static_cast<uint64_t>(n) * 2, path_, what);
    for (int64_t i = 0; i < n; ++i)
      out[done + i] = bf16 ? bf16_to_float(buf[i]) : f16_to_float(buf[i]);
  }
}

// --- writer -------------------------------------------------------------------

namespace {

// All of [data, data + bytes) to fd, retrying short and interrupted writes.
void write_all(int fd, const void* data, uint64_t bytes, const std::string& path,
               const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, uint64_t{1} << 30));
    const ssize_t n = ::write(fd, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    FANOUT_CHECK(n > 0, path, ": cannot write '", tmp, "': ", std::strerror(errno));
    p += n;
    bytes -= static_cast<uint64_t>(n);
  }
}

// Best effort: makes the rename itself survive a crash.
void sync_parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

namespace {
// The safetensors name of each fanout dtype.
const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u16:
      return "U16";
  }
  return "?";
}
}  // namespace

void safetensors_write(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the tensors in the given order, as in the data section.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    FANOUT_CHECK(t.name != "__metadata__", path, ": '__metadata__' cannot name a tensor");
    FANOUT_CHECK(names.insert(t.name).second, path, ": tensor '", t.name, "' is given twice");
    for (int64_t d : t.shape) {
      FANOUT_CHECK(d >= 0, path, ": tensor '", t.name, "' has a negative dimension in shape ",
                   shape_str(t.shape));
    }
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    FANOUT_CHECK(bytes == 0 || t.data != nullptr, path, ": tensor '", t.name, "' has no data");
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + bytes});
    header[t.name] = std::move(entry);
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();  // compact, like the reference writer
  } catch (const nlohmann::json::exception&) {
    FANOUT_CHECK(false, path, ": tensor names and metadata must be valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((text.size() >> (8 * i)) & 0xffu);
  prefix += text;

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FANOUT_CHECK(fd >= 0, path, ": cannot create '", tmp, "': ", std::strerror(errno));
  try {
    write_all(fd, prefix.data(), prefix.size(), path, tmp);
    for (size_t i = 0; i < tensors.size(); ++i) {
      write_all(fd, tensors[i].data, sizes[i], path, tmp);
    }
    FANOUT_CHECK(::fsync(fd) == 0, path, ": cannot sync '", tmp, "': ", std::strerror(errno));
    const int rc = ::close(fd);
    fd = -1;
    FANOUT_CHECK(rc == 0, path, ": cannot close '", tmp, "': ", std::strerror(errno));
    FANOUT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot rename '", tmp,
                 "' into place: ", std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  sync_parent_dir(path);
}

}  // namespace fanout::models
