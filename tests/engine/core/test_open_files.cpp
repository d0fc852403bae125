// open_files_ensure: a soft RLIMIT_NOFILE below the need is raised to it (never
// lowered), and a need past the hard limit is one error naming both numbers.

#include "engine/core/open_files.h"

#include <sys/resource.h>

#include <string>

#include <doctest/doctest.h>

#include "engine/core/check.h"
#include "tests/apps/fanout/cli_runner.h"

using fanout::open_files_ensure;
using fanout::test::error_of;
using fanout::test::has;

namespace {
// Puts this process's open-file limits back as they were, however the test ends.
struct LimitsRestored {
  rlimit saved{};
  LimitsRestored() { REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0); }
  ~LimitsRestored() { ::setrlimit(RLIMIT_NOFILE, &saved); }
};
}  // namespace

TEST_CASE("open_files_ensure raises the soft limit to the need, up to the hard limit") {
  const LimitsRestored restored;
  const rlimit saved = restored.saved;
  const bool room = saved.rlim_max == RLIM_INFINITY || saved.rlim_max >= 512;
  REQUIRE_MESSAGE(room, "a hard open-file limit of ", saved.rlim_max,
                  " leaves no room for this test");
  rlimit low = saved;
  low.rlim_cur = 256;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  CHECK(open_files_ensure(100, "a job") == 256);  // enough already: unchanged
  CHECK(open_files_ensure(300, "a job") == 300);
  rlimit now{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
  CHECK(now.rlim_cur == 300);
  CHECK(now.rlim_max == saved.rlim_max);
  if (saved.rlim_max != RLIM_INFINITY) {
    const auto past = static_cast<int64_t>(saved.rlim_max) + 1;
    const std::string why = error_of([&] { open_files_ensure(past, "rank 0 of 9 ranks"); });
    CHECK(has(why, "rank 0 of 9 ranks needs about " + std::to_string(past) +
                       " open files, and this process may open at most " +
                       std::to_string(saved.rlim_max)));
    CHECK(has(why, "ulimit -n " + std::to_string(past)));
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
    CHECK(now.rlim_cur == 300);  // a refusal changes nothing
  }
}
