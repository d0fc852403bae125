#include "engine/core/open_files.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "engine/core/check.h"

namespace fanout {

int64_t open_files_ensure(int64_t need, std::string_view what) {
  rlimit limit{};
  FANOUT_CHECK(::getrlimit(RLIMIT_NOFILE, &limit) == 0,
               "cannot read how many files this process may open: ", std::strerror(errno));
  const auto fits = [need](rlim_t n) {
    return n == RLIM_INFINITY || static_cast<uint64_t>(n) >= static_cast<uint64_t>(need);
  };
  if (fits(limit.rlim_cur)) return static_cast<int64_t>(limit.rlim_cur);
  FANOUT_CHECK(fits(limit.rlim_max), what, " needs about ", need,
               " open files, and this process may open at most ", limit.rlim_max,
               " (ulimit -Hn): raise the limit, e.g. ulimit -n ", need, ", or run fewer ranks");
  limit.rlim_cur = static_cast<rlim_t>(need);
  FANOUT_CHECK(::setrlimit(RLIMIT_NOFILE, &limit) == 0, what, " needs about ", need,
               " open files, and raising this process's limit (ulimit -n ", limit.rlim_max,
               ") failed: ", std::strerror(errno));
  return need;
}

}  // namespace fanout
