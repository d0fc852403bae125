#include "apps/train/schedule.h"

#include <cmath>

#include "engine/core/check.h"

namespace fanout::train {

void Schedule::validate() const {
  FANOUT_CHECK(kind == "cosine" || kind == "constant",
               "--schedule must be cosine or constant, got '", kind, "'");
  FANOUT_CHECK(lr > 0 && std::isfinite(lr), "--lr must be positive, got ", lr);
  FANOUT_CHECK(min_lr >= 0 && min_lr <= lr, "--min-lr must be within [0, --lr], got ", min_lr);
  FANOUT_CHECK(warmup >= 0, "--warmup must not be negative, got ", warmup);
  FANOUT_CHECK(steps > 0, "--steps must be positive, got ", steps);
}

double Schedule::at(int64_t step) const {
  if (warmup > 0 && step <= warmup) return lr * static_cast<double>(step) / warmup;
  if (kind == "constant") return lr;
  int64_t span = steps - warmup;
  if (span <= 0) return lr;
  double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace fanout::train
