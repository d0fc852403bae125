#pragma once
// Learning-rate schedules: linear warmup from 0 over `warmup` steps, then either
// constant or cosine decay to min_lr at the last step (steps are 1-based).

#include <cstdint>
#include <string>

namespace fanout::train {

struct Schedule {
  std::string kind = "cosine";  // cosine | constant
  double lr = 3e-3, min_lr = 3e-4;
  int64_t warmup = 0, steps = 1;

  // Throws fanout::Error for a bad setting.
  void validate() const;
  double at(int64_t step) const;
  // Whether at() depends on `steps`: the cosine ends at min_lr on the last step;
  // constant (after its warmup) never looks at it.
  bool uses_horizon() const { return kind != "constant"; }
};

}  // namespace fanout::train
