#pragma once
// A run's metrics.jsonl read back (what apps/train/trainer.cpp writes): per step
// {"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_s", "tokens",
// "peak_bytes": {device: bytes}}, and per evaluation {"step", "val_loss"}.
// Note [Repeated steps]: a step may appear more than once (a resumed run's log
// cut by an older build, or logs joined by hand); the line written last wins,
// as it belongs to the run that went on from there.

#include <cstdint>
#include <map>
#include <string>

namespace fanout::presentation {

using StepValues = std::map<int64_t, double>;  // step -> value, steps ascending

struct RunMetrics {
  StepValues loss, val_loss, lr, grad_norm, tokens_per_s;
  std::map<std::string, StepValues> peak_bytes;  // device ("cpu:0") -> step -> bytes
  int64_t lines = 0;                             // JSON lines read
};

// Parses metrics.jsonl text; `name` is the file named in errors. Blank lines are
// skipped; a line that is not a JSON object with an integer "step" (within int64)
// throws "NAME:LINE: ..."; a null value (a non-finite number, as JSON writes it)
// is left out; fields not listed above are ignored.
RunMetrics metrics_parse(const std::string& text, const std::string& name);

// Reads `path` (a regular file; "PATH: no such file" otherwise).
RunMetrics metrics_read(const std::string& path);

// RUN_DIR/metrics.jsonl; throws "RUN_DIR: no metrics.jsonl (not a fanout train
// run directory?)" when it is missing.
RunMetrics metrics_read_run(const std::string& run_dir);

}  // namespace fanout::presentation
