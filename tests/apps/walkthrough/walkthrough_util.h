#pragma once
// What the walkthrough's tests share: its narration read without the wrapping.

#include <string>

namespace fanout::test {

// `text` with every line break and the indent after it read as one space: the
// narration wraps long lines, the tests look for whole phrases.
std::string unwrapped(const std::string& text);

}  // namespace fanout::test
