#include "apps/presentation/text_table.h"

#include <algorithm>

#include "apps/data/terminal_text.h"

namespace fanout::presentation {

namespace {
using data::display_width;

std::string padded(const std::string& s, size_t width, bool left) {
  const size_t w = display_width(s);
  const std::string pad(w < width ? width - w : 0, ' ');
  return left ? s + pad : pad + s;
}

void trim_right(std::string& line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
}
}  // namespace

std::string text_wrap(const std::string& text, size_t width, const std::string& indent,
                      size_t column) {
  std::string out;
  bool line_start = true, broken = false;  // no word on this line yet; a line was broken
  for (size_t i = 0; i < text.size();) {
    // The spaces before a word separate it from the last one on its line; a line
    // break replaces them.
    const size_t sep_at = i;
    while (i < text.size() && text[i] == ' ') ++i;
    std::string sep = text.substr(sep_at, i - sep_at);
    const size_t word_at = i;
    while (i < text.size() && text[i] != ' ') ++i;
    const std::string word = text.substr(word_at, i - word_at);
    if (word.empty()) break;  // trailing spaces
    const size_t w = display_width(word);
    if (width > 0 && !line_start && column + sep.size() + w > width) {
      out += "\n" + indent;
      column = display_width(indent), line_start = true, broken = true;
    }
    if (line_start && broken) sep.clear();
    out += sep + word;
    column += sep.size() + w, line_start = false;
  }
  return out + "\n";
}

std::string text_table_render(const TextTable& t, size_t width) {
  const size_t n = t.columns.size();
  std::vector<size_t> widths(n);
  for (size_t c = 0; c < n; ++c) {
    widths[c] = std::max(t.columns[c].width, t.head ? display_width(t.columns[c].head) : 0);
    for (const TextRow& r : t.rows) {
      if (c < r.cells.size() && (r.note.empty() || c < t.keys))
        widths[c] = std::max(widths[c], display_width(r.cells[c]));
    }
  }
  size_t key_width = display_width(t.indent);
  for (size_t c = 0; c < t.keys && c < n; ++c) key_width += (c ? t.gap : 0) + widths[c];
  auto cell_of = [&](const TextRow& r, size_t c) { return c < r.cells.size() ? r.cells[c] : ""; };
  auto line_of = [&](const std::vector<size_t>& cols, auto text_of) {
    std::string line = t.indent;
    for (size_t k = 0; k < cols.size(); ++k) {
      const size_t c = cols[k];
      line += (k ? std::string(t.gap, ' ') : "") +
              padded(text_of(c), widths[c], c < t.keys || t.columns[c].left);
    }
    trim_right(line);
    return line + "\n";
  };

  std::string out;
  bool first_block = true;
  for (size_t next = std::min(t.keys, n); first_block || next < n; first_block = false) {
    std::vector<size_t> cols;
    for (size_t c = 0; c < t.keys && c < n; ++c) cols.push_back(c);
    size_t used = key_width;
    while (next < n) {
      const size_t more = (cols.empty() ? 0 : t.gap) + widths[next];
      if (width > 0 && used + more > width && cols.size() > t.keys) break;
      cols.push_back(next++), used += more;
    }
    if (!first_block) out += "\n";
    if (t.head) out += line_of(cols, [&](size_t c) { return t.columns[c].head; });
    for (const TextRow& r : t.rows) {
      if (r.note.empty()) {
        out += line_of(cols, [&](size_t c) { return cell_of(r, c); });
      } else if (first_block) {
        std::vector<size_t> keys(cols.begin(), cols.begin() + std::min(t.keys, cols.size()));
        std::string line = line_of(keys, [&](size_t c) { return cell_of(r, c); });
        line.pop_back();  // the '\n'
        line = padded(line, key_width, true) + std::string(t.gap, ' ');
        out +=
            line + text_wrap(r.note, width, std::string(key_width + t.gap, ' '), key_width + t.gap);
      }
    }
  }
  return out;
}

}  // namespace fanout::presentation
