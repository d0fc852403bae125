#pragma once
// The training loop behind `fanout train`: validates every input before writing
// anything, then trains through the DataParallel engine with AdamW, a warmup +
// cosine (or constant) schedule, gradient accumulation and clipping; writes
// metrics.jsonl and atomic checkpoints; resumes exactly; stops cleanly on Ctrl-C
// (exit 130) and on a NaN/Inf loss or gradient norm (an error naming the step).

#include <set>
#include <string>

#include "apps/train/train_options.h"

namespace fanout::train {

// `given`: the flags named on the command line (they win over a resumed run's
// saved settings). Returns the exit code; throws fanout::Error for bad input.
// `run_dir`, if given, is set on rank 0 to the run directory once the run owns
// it (before the first step; it stays empty if the run stopped earlier).
int train_run(TrainOptions options, const std::set<std::string>& given,
              std::string* run_dir = nullptr);

}  // namespace fanout::train
