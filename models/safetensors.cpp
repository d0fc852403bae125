#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "engine/core/file_io.h"
#include "engine/core/json_parse.h"

namespace fanout::models {

// The data section is copied to and from memory as is.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
// Real checkpoints hold at most tens of thousands of tensors of a few dimensions;
// these bound the work and memory a hostile header can ask for.
constexpr size_t kMaxEntries = 1'000'000;
constexpr size_t kMaxRank = 64;
constexpr size_t kMaxEntryValues = 1024;  // JSON values inside one tensor's entry

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
  return detail::str_cat("[", begin, ", ", end, "]");
}

// All of [offset, offset + bytes) of `fd` into dst; a short read means the file shrank.
void pread_exact(int fd, void* dst, uint64_t bytes, uint64_t offset, const std::string& path,
                 const std::string& what) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, uint64_t{1} << 30));
    const ssize_t n = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    FANOUT_CHECK(n >= 0, path, ": cannot read ", what, ": ", std::strerror(errno));
    FANOUT_CHECK(n > 0, path, ": short read of ", what, " (file truncated or changed while open?)");
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

// "<path>: tensor '<name>'" for messages, built only when one is thrown.
struct TensorWhere {
  const std::string& path;
  const std::string& name;
};
std::ostream& operator<<(std::ostream& os, const TensorWhere& w) {
  return os << w.path << ": tensor '" << w.name << "'";
}

// Everything about one tensor's entry that does not depend on the other tensors.
SafetensorsEntry parse_entry(const std::string& path, std::string&& name, const json& v,
                             uint64_t data_size) {
  SafetensorsEntry e;
  e.name = std::move(name);
  const TensorWhere where{path, e.name};
  FANOUT_CHECK(v.is_object(), where, ": entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    FANOUT_CHECK(v.contains(key), where, ": missing \"", key, "\"");
  }

  const json& dtype = v.at("dtype");
  FANOUT_CHECK(dtype.is_string(), where, ": \"dtype\" is not a string");
  e.dtype = dtype.get<std::string>();
  const int bits = dtype_bits(e.dtype);
  FANOUT_CHECK(bits > 0, where, ": unknown dtype '", e.dtype, "'");

  // Non-negative JSON integers parse as unsigned, negative ones as signed.
  const json& shape = v.at("shape");
  FANOUT_CHECK(shape.is_array(), where, ": \"shape\" is not an array of integers");
  FANOUT_CHECK(shape.size() <= kMaxRank, where, ": shape has ", shape.size(),
               " dimensions, more than the ", kMaxRank, " a tensor may have");
  // a * b through size_mul only when it overflows, so that the message (which names
  // the shape) is built only then.
  auto mul = [&](int64_t a, int64_t b) {
    int64_t out = 0;
    if (__builtin_mul_overflow(a, b, &out))
      size_mul(detail::str_cat(where, ": shape ", shape.dump()), {a, b});
    return out;
  };
  int64_t numel = 1;
  e.shape.reserve(shape.size());
  for (const json& d : shape) {
    FANOUT_CHECK(d.is_number_integer(), where, ": \"shape\" is not an array of integers");
    FANOUT_CHECK(d.is_number_unsigned(), where, ": negative dimension in shape ", shape.dump());
    const uint64_t n = d.get<uint64_t>();
    FANOUT_CHECK(n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where, ": shape ",
                 shape.dump(), " is too large: dimension ", n, " does not fit in 64 bits");
    numel = mul(numel, static_cast<int64_t>(n));
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const int64_t total_bits = mul(numel, bits);
  FANOUT_CHECK(total_bits % 8 == 0, where, ": ", numel, " ", e.dtype,
               " elements do not fill whole bytes");
  const uint64_t bytes = static_cast<uint64_t>(total_bits / 8);

  const json& offsets = v.at("data_offsets");
  FANOUT_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               where, ": \"data_offsets\" is not [begin, end] of non-negative integers");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  FANOUT_CHECK(e.begin <= e.end, where, ": data_offsets ", range_str(e.begin, e.end),
               " have begin > end");
  FANOUT_CHECK(e.end - e.begin == bytes, where, ": data_offsets ", range_str(e.begin, e.end),
               " hold ", e.end - e.begin, " bytes but ", e.dtype, " ", shape.dump(), " needs ",
               bytes);
  FANOUT_CHECK(e.end <= data_size, where, ": data_offsets ", range_str(e.begin, e.end),
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

// Note [Linear header parse]
// nlohmann's DOM parser with a callback (the way to spot repeated keys) rescans the
// whole parent object each time a nested object ends, to drop discarded values: a
// header of n tensors took O(n^2) steps (20k tensors 27 s). HeaderSax receives the
// SAX events itself and builds one small JSON value per top-level key, hands it to
// parse_entry and drops it: linear time, and memory for the entries only, never a
// DOM of the whole header.
class HeaderSax {
 public:
  // on_entry(name, value) runs once per top-level key, in file order.
  using EntryFn = std::function<void(std::string&&, json&&)>;
  HeaderSax(const std::string& path, EntryFn on_entry)
      : path_(path), on_entry_(std::move(on_entry)) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json(std::move(v))); }
  bool start_object(size_t) { return open(json::object()); }
  bool start_array(size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    if (!open_.empty()) {
      keys_.back() = std::move(k);  // a key inside the current entry
      return true;
    }
    FANOUT_CHECK(++entries_seen_ <= kMaxEntries, path_, ": the header has more than ", kMaxEntries,
                 " entries (the most this reader accepts)");
    name_ = std::move(k);
    return true;
  }

  template <typename Exception>
  bool parse_error(size_t, const std::string&, const Exception& e) {
    detail::throw_error(detail::str_cat(path_, ": header is not valid JSON: ", json_error_text(e)));
  }

 private:
  // A value inside the open entry.
  json* insert(json&& v) {
    FANOUT_CHECK(name_ == "__metadata__" || ++values_ <= kMaxEntryValues, path_, ": tensor '",
                 name_, "': its entry holds more than ", kMaxEntryValues, " JSON values");
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[keys_.back()];
    slot = std::move(v);
    return &slot;
  }
  bool put(json&& v) {
    if (depth_ == 0) return true;  // a scalar root: refused before parsing (first byte '{')
    if (open_.empty()) {
      entry_ = std::move(v);  // a scalar entry, refused by parse_entry
      finish();
    } else {
      insert(std::move(v));
    }
    return true;
  }
  bool open(json&& v) {
    if (depth_++ == 0) return true;  // the root object itself
    json* p = nullptr;
    if (open_.empty()) {
      entry_ = std::move(v);
      p = &entry_;
    } else {
      // Only the innermost open container grows, so pointers to the outer ones stay valid.
      p = insert(std::move(v));
    }
    open_.push_back(p);
    keys_.emplace_back();
    return true;
  }
  bool close() {
    --depth_;
    if (open_.empty()) return true;  // the root object ends
    open_.pop_back();
    keys_.pop_back();
    if (open_.empty()) finish();
    return true;
  }
  void finish() {
    on_entry_(std::move(name_), std::move(entry_));
    entry_ = json();
    values_ = 0;
  }

  const std::string& path_;
  EntryFn on_entry_;
  size_t entries_seen_ = 0;  // top-level keys so far
  std::string name_;         // the top-level key being parsed
  json entry_;               // its value
  std::vector<json*> open_;  // containers open inside entry_, innermost last
  std::vector<std::string> keys_;
  size_t values_ = 0;
  int64_t depth_ = 0;
};

}  // namespace

// --- reader -------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const RegularFile in(path);
  const uint64_t file_size = in.size();
  FANOUT_CHECK(file_size >= 8, path, ": file is ", file_size,
               " bytes, too short for the 8-byte header length");

  unsigned char length_bytes[8];
  pread_exact(in.fd(), length_bytes, 8, 0, path, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length_bytes[i];
  FANOUT_CHECK(n <= kMaxHeaderBytes, path, ": header length ", n,
               " exceeds the 100 MB limit (not a safetensors file?)");
  FANOUT_CHECK(n <= file_size - 8, path, ": header length ", n, " runs past the end of the file (",
               file_size, " bytes)");
  std::string header(n, '\0');
  pread_exact(in.fd(), header.data(), n, 8, path, "the header");
  FANOUT_CHECK(n > 0 && header[0] == '{', path,
               ": header does not start with '{' (not a safetensors file?)");
  // JSON never holds a raw NUL, but nlohmann's lexer would take one for the end of input.
  const size_t nul = header.find('\0');
  FANOUT_CHECK(nul == std::string::npos, path, ": header is not valid JSON: NUL byte at offset ",
               nul);

  SafetensorsFile file;
  file.path_ = path;
  file.data_start_ = 8 + n;
  const uint64_t data_size = file_size - file.data_start_;
  std::vector<SafetensorsEntry> entries;  // header order
  bool has_metadata = false;
  HeaderSax sax(path, [&](std::string&& name, json&& value) {
    if (name == "__metadata__") {
      FANOUT_CHECK(!has_metadata, path, ": tensor '__metadata__' appears twice in the header");
      has_metadata = true;
      file.metadata_ = parse_metadata(path, value);
      return;
    }
    entries.push_back(parse_entry(path, std::move(name), value, data_size));
  });
  json::sax_parse(header, &sax);  // every problem throws from inside, parse errors included
  header = std::string();

  // File-offset order; zero-size tensors that share an offset keep their header order.
  // Sorting positions compares integers only, never names.
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const SafetensorsEntry &x = entries[a], &y = entries[b];
    if (x.begin != y.begin) return x.begin < y.begin;
    return x.end != y.end ? x.end < y.end : a < b;
  });
  file.entries_.reserve(entries.size());
  file.index_.reserve(entries.size());
  for (size_t i : order) {
    SafetensorsEntry& e = entries[i];
    FANOUT_CHECK(file.index_.emplace(e.name, file.entries_.size()).second, path, ": tensor '",
                 e.name, "' appears twice in the header");
    file.entries_.push_back(std::move(e));
  }
  check_tiling(path, file.entries_, data_size);
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

  // A fresh descriptor per call: several threads may read tensors at once.
  const RegularFile in(path_);
  FANOUT_CHECK(in.size() >= data_start_ + e->end, path_,
               ": the file shrank since it was opened (tensor '", name, "' is cut off)");
  const std::string what = "tensor '" + name + "'";
  const uint64_t offset = data_start_ + e->begin;
  if (f32) {
    pread_exact(in.fd(), out, e->end - e->begin, offset, path_, what);
    return;
  }
  // 16-bit sources convert through a bounded buffer, not a second full copy.
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint16_t> buf(static_cast<size_t>(std::min(numel, kChunk)));
  for (int64_t done = 0; done < numel; done += kChunk) {
    const int64_t n = std::min(kChunk, numel - done);
    pread_exact(in.fd(), buf.data(), static_cast<uint64_t>(n) * 2,
                offset + static_cast<uint64_t>(done) * 2, path_, what);
    for (int64_t i = 0; i < n; ++i)
      out[done + i] = bf16 ? bf16_to_float(buf[i]) : f16_to_float(buf[i]);
  }
}

}  // namespace fanout::models
