#include "engine/core/check.h"
#include "engine/core/checked_math.h"

namespace fanout::detail {

void throw_error(const std::string& msg) {
  throw Error(msg);
}

void throw_internal(const char* cond, const char* file, int line, const std::string& msg) {
  throw InternalError(str_cat("internal error: ", cond, " failed at ", file, ":", line,
                              msg.empty() ? "" : ": ", msg));
}

void throw_size_overflow(std::string_view what, std::initializer_list<int64_t> terms, char op) {
  std::string expr;
  bool negative = false;
  for (int64_t t : terms) {
    expr += (expr.empty() ? "" : op == 'x' ? " x " : " + ") + std::to_string(t);
    negative |= t < 0;
  }
  if (negative) throw Error(str_cat(what, ": a term of ", expr, " is negative"));
  throw Error(str_cat(what, " is too large: ", expr, " does not fit in 64 bits"));
}

}  // namespace fanout::detail
