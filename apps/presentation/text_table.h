#pragma once
// Text laid out for a terminal `width` columns wide (apps/data/terminal_text.h
// says how wide it is): prose word-wrapped under an indent, and tables whose rows,
// when wider than the width, continue in further blocks below, each block starting
// with the table's key columns. `fanout bench` and the walkthrough print through
// these; width 0 is their --wide form (nothing wrapped, every table in one block).

#include <cstddef>
#include <string>
#include <vector>

namespace fanout::presentation {

// `text` word-wrapped at its spaces to `width` display columns, its first line
// starting at `column` (what the caller printed before it), every line ended by
// '\n' and every line after the first begun by `indent`. Spaces between words on
// one line stay as written; a word wider than the room stays whole on its line.
// Width 0: `text` and '\n'.
std::string text_wrap(const std::string& text, size_t width, const std::string& indent = "",
                      size_t column = 0);

struct TextColumn {
  std::string head;
  size_t width = 0;   // at least this many columns (else its widest cell or head)
  bool left = false;  // left-aligned (the key columns always are), else right-aligned
};

struct TextRow {
  std::vector<std::string> cells;  // one per column; a note row: its key cells only
  // A note row's text (a failed row's reason): after the key cells of the first
  // block, wrapped under itself; the row is absent from the blocks that follow.
  std::string note;
};

struct TextTable {
  std::vector<TextColumn> columns;  // the first `keys` are the key columns
  size_t keys = 1;
  std::vector<TextRow> rows;
  std::string indent;  // before every line
  size_t gap = 1;      // spaces before every column but the first
  bool head = true;    // a line of column heads above the rows
};

// The table in as few blocks as fit `width` display columns (0: one block): the
// key columns, then the following columns while they fit (at least one each
// block); blocks are separated by an empty line. No trailing spaces.
std::string text_table_render(const TextTable& t, size_t width);

}  // namespace fanout::presentation
