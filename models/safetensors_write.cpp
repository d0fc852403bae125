// safetensors_write: the writer half of models/safetensors.h (the reader, which
// validates what users give it, is safetensors.cpp).

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/check.h"
#include "engine/core/durable_file.h"
#include "models/safetensors.h"

namespace fanout::models {

// The data section is copied from memory as is.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

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
  const std::string dir = std::filesystem::path(path).parent_path().string();
  dir_sync_best_effort(dir.empty() ? "." : dir);
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
