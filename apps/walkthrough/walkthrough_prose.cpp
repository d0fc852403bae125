#include "apps/walkthrough/walkthrough_prose.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "apps/data/terminal_text.h"

namespace fanout::walkthrough::walk {

// --- Prose ------------------------------------------------------------------

std::string Prose::bold(const std::string& s) const {
  return color_ ? "\033[1m" + s + "\033[0m" : s;
}

std::string Prose::heading(const std::string& s) const {
  return color_ ? "\033[1;36m" + s + "\033[0m" : s;
}

void Prose::title(const std::string& text) {
  out_ << presentation::text_wrap(heading(text), width_, "   ");
}

void Prose::line(const std::string& label, const std::string& text) {
  std::string pad = label.size() < 11 ? std::string(11 - label.size(), ' ') : " ";
  out_ << "  " << bold(label) << pad;
  wrap(text, 2 + label.size() + pad.size());
}

void Prose::more(const std::string& text) {
  out_ << std::string(kIndent, ' ');
  wrap(text, kIndent);
}

void Prose::wrap(const std::string& text, size_t column) {
  // A space may break a line unless it sits inside a shape or range: "(3, 32, 259)".
  auto breakable = [&](size_t i) {
    return text[i] == ' ' && !(i > 0 && text[i - 1] == ',' && i + 1 < text.size() &&
                               std::isdigit(static_cast<unsigned char>(text[i + 1])));
  };
  size_t at = 0;
  while (at < text.size()) {
    size_t room = column < prose_width_ ? prose_width_ - column : 20, end = text.size();
    if (end - at > room) {
      size_t cut = at + room;
      while (cut > at && !breakable(cut)) --cut;
      if (cut == at) {  // one long word: break after it
        cut = at + room;
        while (cut < text.size() && !breakable(cut)) ++cut;
      }
      end = cut;
    }
    out_ << text.substr(at, end - at) << "\n";
    at = end < text.size() ? end + 1 : end;
    if (at < text.size()) out_ << std::string(kIndent, ' ');
    column = kIndent;
  }
}

// --- memory tables ------------------------------------------------------------

void Prose::split_model_end(double loss, double dp_loss, const std::string& same,
                            const std::vector<presentation::DevicePeak>& memory) {
  const bool equal = std::abs(loss - dp_loss) <= 1e-5 * std::abs(dp_loss);
  line("loss",
       strf("%.6f, dp's on the same batch and weights %.6f: %s", loss, dp_loss,
            equal ? same.c_str() : "they differ (the engine's invariant says they must not)"));
  std::vector<std::pair<std::string, presentation::DevicePeak>> rows;
  for (const presentation::DevicePeak& d : memory) rows.emplace_back(d.device, d);
  memory_table("memory", 0, rows);
}

const std::vector<MemTag>& memory_table_tags() {
  static const std::vector<MemTag> tags = {MemTag::params,      MemTag::grads, MemTag::optimizer,
                                           MemTag::activations, MemTag::comm,  MemTag::data};
  return tags;
}

void Prose::table(const presentation::TextTable& t) {
  out_ << presentation::text_table_render(t, width_);
}

void Prose::legend(const std::string& text) {
  // Entries are two spaces apart ("S scatter  P replicate/broadcast"): a line
  // breaks only there, continuing under the first entry after "legend:".
  std::string line = "  ";
  bool empty = true;  // no entry on this line yet
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find("  ", at), text.size());
    const std::string entry = text.substr(at, end - at);
    if (!empty && width_ > 0 &&
        data::display_width(line) + 2 + data::display_width(entry) > width_) {
      out_ << line << "\n";
      line = std::string(11, ' '), empty = true;
    }
    line += (empty ? "" : "  ") + entry, empty = false;
    at = end + 2;
  }
  out_ << line << "\n";
}

void Prose::memory_table(
    const std::string& head, size_t label_width,
    const std::vector<std::pair<std::string, presentation::DevicePeak>>& rows) {
  // --wide: as it always was, 12 columns a figure after a 13-column indent.
  const bool wide = width_ == 0;
  presentation::TextTable t;
  t.indent = std::string(wide ? kIndent : 4, ' ');
  t.gap = wide ? 0 : 1;
  t.columns = {{head, wide ? label_width : 0, true}};
  const size_t figure = wide ? 12 : 0;
  if (!wide) t.columns.push_back({"total", figure});
  for (MemTag tag : memory_table_tags()) t.columns.push_back({mem_tag_name(tag), figure});
  if (wide) t.columns.push_back({"total", figure});
  for (const auto& [label, d] : rows) {
    std::vector<std::string> cells = {label};
    if (!wide) cells.push_back(bytes_str(d.peak_bytes));
    for (MemTag tag : memory_table_tags()) cells.push_back(bytes_str(d.tag(tag)));
    if (wide) cells.push_back(bytes_str(d.peak_bytes));
    t.rows.push_back({cells, ""});
  }
  table(t);
}

}  // namespace fanout::walkthrough::walk
