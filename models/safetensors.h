#pragma once
// safetensors, the checkpoint format HuggingFace transformers loads: an 8-byte
// little-endian header length N, N bytes of JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end)} (plus an optional "__metadata__"
// string map), then the raw little-endian data. SafetensorsFile validates the whole
// header when it opens a file, so later reads can trust every offset in it. Only a
// regular file is opened (a FIFO would block); the header is at most 100 MB with at
// most 1,000,000 entries, and parses in linear time.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/tensor.h"

namespace fanout::models {

// One tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // the file's name for it: "F32", "BF16", "F16", "I32", "I64", "U8", ...
  Shape shape;
  size_t begin = 0, end = 0;  // bytes, relative to the start of the data section
};

// --- reader -------------------------------------------------------------------

class SafetensorsFile {
 public:
  // Reads and validates the header; throws fanout::Error "<path>: <reason>".
  static SafetensorsFile open(const std::string& path);

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // file-offset order
  const SafetensorsEntry* find(const std::string& name) const;               // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

  // Tensor `name` converted to f32 into out[numel]. The source must be F32, BF16 or F16
  // and numel must equal the entry's; only that tensor's bytes are read. Safe to call
  // from several threads at once (each call opens its own descriptor).
  void read_f32(const std::string& name, float* out, int64_t numel) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
  uint64_t data_start_ = 0;  // file offset of the data section: 8 + header length
};

// --- writer -------------------------------------------------------------------

struct SafetensorsTensor {
  std::string name;
  DType dtype;  // stored as F32, BF16, I32, I64 or U16
  Shape shape;
  const void* data;  // host memory, shape_numel(shape) elements of dtype
};

// (safetensors_write.cpp) Writes `tensors` laid out in the given order, with the header padded with
// spaces to a multiple of 8 bytes (as the reference writer does, so the data is 8-byte aligned).
// The file appears atomically: written to path + ".tmp", fsync'd, then renamed.
void safetensors_write(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace fanout::models
