#pragma once
// Errors for fanout (see STYLE.md "Errors"):
//   FANOUT_CHECK(cond, msg...)  the caller's mistake -> fanout::Error with an actionable message
//   FANOUT_ASSERT(cond, msg...) a broken invariant (a bug) -> fanout::InternalError
// Messages are built from any streamable pieces: FANOUT_CHECK(n > 0, "batch size ", n, " ...").

#include <sstream>
#include <stdexcept>
#include <string>

namespace fanout {

// A user-facing error: the message alone is what `main` prints.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bug in fanout itself; the message carries file:line.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const std::string& msg);
[[noreturn]] void throw_internal(const char* cond, const char* file, int line,
                                 const std::string& msg);
}  // namespace detail

}  // namespace fanout

#define FANOUT_CHECK(cond, ...)                                                         \
  do {                                                                                  \
    if (!(cond)) ::fanout::detail::throw_error(::fanout::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define FANOUT_ASSERT(cond, ...)                                                                  \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::fanout::detail::throw_internal(#cond, __FILE__, __LINE__,                                 \
                                       ::fanout::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
