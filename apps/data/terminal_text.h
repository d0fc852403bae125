#pragma once
// Generated text made safe to print. A model samples any token, so its text can
// hold terminal control sequences (ESC [ ... moves the cursor, clears the screen,
// retitles the window) or bytes that are not UTF-8. Whatever the output is (a
// terminal, a pipe, a file), generated text goes out through terminal_text_escape.
// Tables and prose fit the terminal's width: terminal_columns says how wide it is,
// display_width how wide a string shows.

#include <cstddef>
#include <string>
#include <string_view>

namespace fanout::data {

// `text` with every control character except '\n' and '\t' made visible:
//   C0 controls (0x00-0x1f) and DEL (0x7f)  -> "\x1b" (backslash, x, two hex digits)
//   C1 controls (U+0080-U+009F)             -> "\u009b"
//   a byte that does not start or continue a valid UTF-8 sequence (overlong forms,
//   surrogates and code points past U+10FFFF included) -> U+FFFD, one per byte
// Valid UTF-8 otherwise passes unchanged (a backslash too).
std::string terminal_text_escape(std::string_view text);

// How wide the terminal behind `fd` is: $COLUMNS when it is a whole number in
// 1..100000 (a shell sets it for its own terminal; anything else in it is ignored,
// being no mistake of the command's user), else the width of `fd` when it is a
// terminal (ioctl TIOCGWINSZ), else 80 (a pipe or a file).
size_t terminal_width(int fd);

// The columns printed text on stdout should fit: terminal_width(stdout), never
// below 40 (narrower, nothing would fit anyway).
size_t terminal_columns();

// The columns `text` takes on a terminal: one per UTF-8 character (a lead byte or a
// byte that is not UTF-8; continuation bytes add none), ANSI colour and cursor
// sequences (ESC [ ... final byte) none. Wide CJK characters count one.
size_t display_width(std::string_view text);

}  // namespace fanout::data
