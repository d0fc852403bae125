// Text fitted to a width: text_wrap breaks at spaces under an indent and keeps a
// long word whole; text_table_render keeps every line within the width by moving
// columns into further blocks that repeat the key columns, wraps a note row's
// text, and at width 0 prints one block however wide.

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "apps/presentation/text_table.h"

using namespace fanout::presentation;

namespace {
// Display columns of each line: UTF-8 lead bytes (independent of display_width).
std::vector<size_t> line_widths(const std::string& text) {
  std::vector<size_t> widths;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t w = 0;
    for (unsigned char c : line) w += (c & 0xC0) != 0x80;
    widths.push_back(w);
  }
  return widths;
}
size_t widest(const std::string& text) {
  size_t w = 0;
  for (size_t l : line_widths(text)) w = std::max(w, l);
  return w;
}
}  // namespace

TEST_CASE("text_wrap breaks at spaces within the width, under the indent") {
  CHECK(text_wrap("one two three", 0) == "one two three\n");
  CHECK(text_wrap("one two three", 9, "  ") == "one two\n  three\n");
  CHECK(text_wrap("one two three", 7) == "one two\nthree\n");
  // The first line starts where the caller's text ended.
  CHECK(text_wrap("one two", 8, "", 4) == "one\ntwo\n");
  // A word wider than the room stays whole; spaces inside a line stay as written.
  CHECK(text_wrap("a averyveryverylongword b", 10, " ") == "a\n averyveryverylongword\n b\n");
  CHECK(text_wrap("legend:  S scatter", 80) == "legend:  S scatter\n");
  // Characters, not bytes: "±1.0%" is five columns.
  CHECK(text_wrap("\xc2\xb1"
                  "1.0% \xc2\xb1"
                  "2.0%",
                  11) ==
        "\xc2\xb1"
        "1.0% \xc2\xb1"
        "2.0%\n");
}

TEST_CASE("a table wider than the width continues in blocks that repeat the key columns") {
  TextTable t;
  t.keys = 2;
  t.columns = {{"mode", 0, true}, {"device", 0, true}};
  for (const char* head : {"params", "grads", "optimizer", "activations", "comm", "total"})
    t.columns.push_back({head, 10});
  t.rows.push_back({{"dp", "cpu:0", "1 B", "2 B", "3 B", "4 B", "5 B",
                     "\xc2\xb1"
                     "6 B"},
                    ""});
  t.rows.push_back({{"", "cpu:1", "7 B", "8 B", "9 B", "10 B", "11 B", "12 B"}, ""});
  const std::string whole = text_table_render(t, 0);
  CAPTURE(whole);
  CHECK(line_widths(whole).size() == 3);     // one block: the heads and two rows
  CHECK(widest(whole) == 11 + 5 * 11 + 12);  // "activations" is 11 wide
  const std::string narrow = text_table_render(t, 40);
  CAPTURE(narrow);
  CHECK(widest(narrow) <= 40);
  // mode + device + 2 columns a block: 3 blocks of 3 lines, 2 empty lines between.
  CHECK(line_widths(narrow).size() == 11);
  CHECK(narrow.find("mode device     params      grads\n") == 0);
  CHECK(narrow.find("\nmode device  optimizer activations\n") != std::string::npos);
  CHECK(narrow.find("\nmode device       comm      total\n") != std::string::npos);
  CHECK(narrow.find("\n     cpu:1        11 B       12 B\n") != std::string::npos);
  // Each block holds at least one column, however narrow the width.
  CHECK(line_widths(text_table_render(t, 5)).size() == 6 * 3 + 5);
}

TEST_CASE("a note row wraps its text after the key columns, in the first block only") {
  TextTable t;
  t.columns = {{"mode", 6, true}, {"tokens/s", 0}, {"step ms", 0}, {"bytes", 0}};
  t.rows.push_back({{"dp", "100", "1.0", "3 B"}, ""});
  t.rows.push_back({{"zero3"}, "failed  out of memory on cpu:0 (--device-memory 8.0 MiB)"});
  const std::string s = text_table_render(t, 25);
  CAPTURE(s);
  CHECK(widest(s) <= 25);
  CHECK(s.find("\nzero3  failed  out of\n       memory on cpu:0\n       (--device-memory\n"
               "       8.0 MiB)\n") != std::string::npos);
  CHECK(s.find("\nmode   bytes\ndp       3 B\n") != std::string::npos);  // no zero3 there
  CHECK(text_table_render(t, 0).find("zero3  failed  out of memory on cpu:0 (--device-memory "
                                     "8.0 MiB)\n") != std::string::npos);
}
