#include "engine/core/check.h"

namespace fanout::detail {

void throw_error(const std::string& msg) {
  throw Error(msg);
}

void throw_internal(const char* cond, const char* file, int line, const std::string& msg) {
  throw InternalError(str_cat("internal error: ", cond, " failed at ", file, ":", line,
                              msg.empty() ? "" : ": ", msg));
}

}  // namespace fanout::detail
