// The spread of step times: half the interquartile range over the median, shown
// as ±%, and whether two such ranges overlap (then their order is noise). The
// quartiles themselves are checked in test_walkthrough.cpp.

#include <doctest/doctest.h>

#include "apps/presentation/step_times.h"

using namespace fanout::presentation;

TEST_CASE("the spread is half the interquartile range over the median") {
  const StepTimes t = step_times_summarize({1, 2, 3, 4, 5});  // q1 2, median 3, q3 4
  CHECK(step_times_spread(t) == doctest::Approx(1.0 / 3));
  CHECK(step_times_spread_str(t) ==
        "\xc2\xb1"
        "33%");
  CHECK(step_times_spread_str(step_times_summarize({0.100, 0.101, 0.102, 0.103, 0.104})) ==
        "\xc2\xb1"
        "1.0%");
  CHECK(step_times_spread(step_times_summarize({7})) == 0);
  CHECK(step_times_spread(StepTimes{}) == 0);  // no samples
}

TEST_CASE("two modes overlap when their interquartile ranges do") {
  const StepTimes fast = step_times_summarize({1.0, 1.1, 1.2, 1.3, 1.4});    // 1.1-1.3
  const StepTimes close = step_times_summarize({1.25, 1.3, 1.4, 1.5, 1.6});  // 1.3-1.5
  const StepTimes slow = step_times_summarize({2.0, 2.1, 2.2, 2.3, 2.4});
  CHECK(step_times_overlap(fast, close));
  CHECK(step_times_overlap(close, fast));
  CHECK(!step_times_overlap(fast, slow));
  CHECK(!step_times_overlap(slow, close));
  CHECK(step_times_overlap(fast, fast));
}
