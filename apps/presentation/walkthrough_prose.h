#pragma once
// The walkthrough's prose, shared by its sections (walkthrough.cpp: the modes;
// walkthrough_precision.cpp: what bf16 changes): labelled lines word-wrapped
// under their text ("  label      text"), printf-style strings, and the table of
// peak bytes per device by allocator tag.

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "apps/presentation/walkthrough.h"
#include "engine/core/allocator.h"
#include "engine/core/device.h"

namespace fanout::presentation::walk {

std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string ms(double seconds);  // "1.23 ms"

class Prose {
 public:
  Prose(std::ostream& out, bool color) : out_(out), color_(color) {}

  std::string bold(const std::string& s) const;
  std::string heading(const std::string& s) const;
  // "  label      text", the text word-wrapped to kWidth columns under itself.
  void line(const std::string& label, const std::string& text);
  // A continuation of the last line's text, at its indent.
  void more(const std::string& text);

 protected:
  static constexpr size_t kWidth = 110, kIndent = 13;  // columns, continuation indent
  void wrap(const std::string& text, size_t column);

  std::ostream& out_;
  bool color_;
};

// The tags the memory tables show, in their column order.
const std::vector<MemTag>& memory_table_tags();
// Peak bytes of each device since its peaks were reset, above what it held in
// `before` (the allocator stats taken then), in total and per tag.
std::vector<DeviceMemory> memory_peaks(const std::vector<Device>& devices,
                                       const std::vector<AllocatorStats>& before);
// One table line: `label` left-aligned in `width` columns after the indent, then
// one column per tag and the total.
std::string memory_table_head(const std::string& label, int width);
std::string memory_table_row(const std::string& label, int width, const DeviceMemory& d);

}  // namespace fanout::presentation::walk
