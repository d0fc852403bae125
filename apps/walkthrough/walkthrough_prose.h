#pragma once
// The walkthrough's prose, shared by its sections (walkthrough.cpp: the modes;
// walkthrough_precision.cpp: what bf16 changes): labelled lines word-wrapped
// under their text ("  label      text"), headings, tables and the timeline's
// legend fitted to the terminal's width, printf-style strings, and the table of
// peak bytes per device by allocator tag.

#include <cstddef>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "apps/presentation/device_peak.h"
#include "apps/presentation/text_format.h"
#include "apps/presentation/text_table.h"
#include "apps/walkthrough/walkthrough.h"
#include "engine/core/allocator.h"
#include "engine/core/device.h"

namespace fanout::walkthrough::walk {

using presentation::ms;
using presentation::strf;

class Prose {
 public:
  // `width`: the columns to fit (WalkthroughOptions::width); 0: --wide, the prose
  // wrapped at kWideWidth columns and headings, tables and legends whole.
  Prose(std::ostream& out, bool color, size_t width = 0)
      : out_(out), color_(color), width_(width), prose_width_(width ? width : kWideWidth) {}

  std::string bold(const std::string& s) const;
  std::string heading(const std::string& s) const;
  // A heading line, wrapped under a 3-column indent.
  void title(const std::string& text);
  // "  label      text", the text word-wrapped under itself.
  void line(const std::string& label, const std::string& text);
  // A continuation of the last line's text, at its indent.
  void more(const std::string& text);
  void table(const presentation::TextTable& t);
  // "  legend:  S scatter  P replicate ...", broken only between its entries.
  void legend(const std::string& text);
  // The peak bytes of each row's device by tag, then the total (first when
  // narrower than --wide, so that it stays in the first block), the labels
  // under `head` in at least `label_width` columns.
  void memory_table(const std::string& head, size_t label_width,
                    const std::vector<std::pair<std::string, presentation::DevicePeak>>& rows);
  // A model split over devices, at the end of its section: "loss" against dp's
  // on the same batch and weights (`same`: what equal losses show), then the
  // memory each device took.
  void split_model_end(double loss, double dp_loss, const std::string& same,
                       const std::vector<presentation::DevicePeak>& memory);

 protected:
  static constexpr size_t kWideWidth = 110, kIndent = 13;  // columns, continuation indent
  void wrap(const std::string& text, size_t column);

  std::ostream& out_;
  bool color_;
  size_t width_, prose_width_;
};

// The tags the memory tables show, in their column order.
const std::vector<MemTag>& memory_table_tags();

}  // namespace fanout::walkthrough::walk
