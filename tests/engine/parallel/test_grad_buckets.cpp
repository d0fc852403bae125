// GradBuckets cuts the gradient buffer into --bucket-mb pieces: any finite size,
// however large, is defined behaviour (one bucket), and a size that is not a
// positive finite number is refused instead of overflowing a cast into
// one-element buckets.

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "engine/parallel/grad_buckets.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using fanout::test::error_of;

TEST_CASE("bucket counts follow --bucket-mb and a huge size is one bucket") {
  CHECK(parallel::GradBuckets(1 << 20, 1.0, 2).count() == 4);  // 1 MiB = 262144 floats
  CHECK(parallel::GradBuckets(1 << 20, 0.5, 2).count() == 8);
  CHECK(parallel::GradBuckets(1000, 1e300, 2).count() == 1);
  CHECK(parallel::GradBuckets(1000, 1e15, 2).count() == 1);     // past int64 elements
  CHECK(parallel::GradBuckets(1000, 1e-9, 2).count() == 1000);  // at least one element
}

TEST_CASE("a bucket size that is not a positive finite number is refused") {
  for (double mb : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                    std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(mb);
    CHECK(error_of([&] { parallel::GradBuckets(1000, mb, 2); }).find("--bucket-mb") !=
          std::string::npos);
  }
}
