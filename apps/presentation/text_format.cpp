#include "apps/presentation/text_format.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace fanout::presentation {

std::string strf(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(static_cast<size_t>(std::max(n, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

std::string ms(double seconds) {
  return strf("%.2f ms", seconds * 1e3);
}

}  // namespace fanout::presentation
