// terminal_text_escape: control characters and invalid UTF-8 never reach the output
// raw; '\n', '\t' and valid UTF-8 (C1 controls aside) pass unchanged. The width
// helpers: display_width counts characters (not bytes, not colour sequences) and
// terminal_columns reads COLUMNS by the shared number rules, else 80 off a terminal;
// terminal_width asks the terminal itself (a pseudo-terminal here) when COLUMNS is
// not a number, and has no floor.

#include "apps/data/terminal_text.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

using fanout::data::terminal_text_escape;

TEST_CASE("C0 controls and DEL are escaped as \\xHH, newline and tab kept") {
  CHECK(terminal_text_escape("plain text") == "plain text");
  CHECK(terminal_text_escape("a\nb\tc") == "a\nb\tc");
  CHECK(terminal_text_escape("\x1b[2J\x1b]0;title\x07") == "\\x1b[2J\\x1b]0;title\\x07");
  CHECK(terminal_text_escape(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(terminal_text_escape("\r\b\x7f") == "\\x0d\\x08\\x7f");
  CHECK(terminal_text_escape("back\\slash") == "back\\slash");
  // Every C0 byte but \n and \t, one by one.
  for (int c = 0; c < 0x20; ++c) {
    const std::string out = terminal_text_escape(std::string(1, static_cast<char>(c)));
    if (c == '\n' || c == '\t') {
      CHECK(out.size() == 1);
    } else {
      CHECK(out.size() == 4);
      CHECK(out[0] == '\\');
    }
  }
}

TEST_CASE("C1 controls are escaped as \\u00HH, other UTF-8 passes") {
  CHECK(terminal_text_escape("\xc2\x9b"
                             "31m") == "\\u009b31m");  // CSI
  CHECK(terminal_text_escape("\xc2\x85") == "\\u0085");
  CHECK(terminal_text_escape("caf\xc3\xa9 \xc2\xa0 \xe2\x82\xac \xf0\x9f\x98\x80") ==
        "caf\xc3\xa9 \xc2\xa0 \xe2\x82\xac \xf0\x9f\x98\x80");
}

TEST_CASE("bytes that are not UTF-8 become U+FFFD, one per byte") {
  const std::string r = "\xef\xbf\xbd";
  CHECK(terminal_text_escape("\xff") == r);
  CHECK(terminal_text_escape("a\x80z") == "a" + r + "z");
  CHECK(terminal_text_escape("\xc3") == r);  // cut short at the end
  CHECK(terminal_text_escape("\xc3"
                             "a") == r + "a");                            // cut short by ASCII
  CHECK(terminal_text_escape("\xc0\xaf") == r + r);                       // overlong '/'
  CHECK(terminal_text_escape("\xe0\x80\xaf") == r + r + r);               // overlong
  CHECK(terminal_text_escape("\xed\xa0\x80") == r + r + r);               // a surrogate
  CHECK(terminal_text_escape("\xf4\x90\x80\x80") == r + r + r + r);       // past U+10FFFF
  CHECK(terminal_text_escape("\xf4\x8f\xbf\xbf") == "\xf4\x8f\xbf\xbf");  // U+10FFFF itself
  // A control byte hidden after a broken sequence is still escaped.
  CHECK(terminal_text_escape("\xe2\x1b") == r + "\\x1b");
}

TEST_CASE("display_width counts UTF-8 characters, not bytes, and no colour sequences") {
  using fanout::data::display_width;
  CHECK(display_width("") == 0);
  CHECK(display_width("tokens/s") == 8);
  CHECK(display_width("\xc2\xb1"
                      "4.8%") == 5);  // "±4.8%": 6 bytes
  CHECK(display_width("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == 8);
  CHECK(display_width("\033[1;36msummary\033[0m") == 7);
  CHECK(display_width("\033[1m") == 0);
}

TEST_CASE("terminal_columns takes COLUMNS when it is a whole number, else 80 off a terminal") {
  using fanout::data::terminal_columns;
  // ctest's stdout is a file or a pipe: no TIOCGWINSZ, so 80 without COLUMNS.
  const char* saved = std::getenv("COLUMNS");
  const std::string before = saved ? saved : "";
  for (const auto& [value, columns] :
       std::vector<std::pair<const char*, size_t>>{{"100", 100},
                                                   {"0120", 120},
                                                   {"20", 40},
                                                   {"", 80},
                                                   {"abc", 80},
                                                   {" 90", 80},
                                                   {"-5", 80},
                                                   {"1e3", 80},
                                                   {"99999999999999999999", 80}}) {
    CAPTURE(value);
    ::setenv("COLUMNS", value, 1);
    if (::isatty(STDOUT_FILENO) && columns == 80) continue;  // run by hand in a terminal
    CHECK(terminal_columns() == columns);
  }
  ::unsetenv("COLUMNS");
  if (!::isatty(STDOUT_FILENO)) CHECK(terminal_columns() == 80);
  if (saved) ::setenv("COLUMNS", before.c_str(), 1);
}

TEST_CASE("terminal_width reads a terminal's own width unless COLUMNS is a number") {
  using fanout::data::terminal_width;
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const char* name = ::ptsname(master);
  REQUIRE(name != nullptr);
  const int tty = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(tty >= 0);
  struct winsize ws {};
  ws.ws_col = 57, ws.ws_row = 20;
  REQUIRE(::ioctl(tty, TIOCSWINSZ, &ws) == 0);
  const char* saved = std::getenv("COLUMNS");
  const std::string before = saved ? saved : "";
  ::unsetenv("COLUMNS");
  CHECK(terminal_width(tty) == 57);
  ::setenv("COLUMNS", "abc", 1);  // not a number: the terminal decides
  CHECK(terminal_width(tty) == 57);
  ::setenv("COLUMNS", "0133", 1);  // decimal, never octal
  CHECK(terminal_width(tty) == 133);
  ::setenv("COLUMNS", "20", 1);  // no floor: a progress bar must fit a narrow terminal
  CHECK(terminal_width(tty) == 20);
  ::unsetenv("COLUMNS");
  const int file = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  REQUIRE(file >= 0);
  CHECK(terminal_width(file) == 80);
  ::close(file);
  ::close(tty);
  ::close(master);
  if (saved) ::setenv("COLUMNS", before.c_str(), 1);
}
