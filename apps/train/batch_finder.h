#pragma once
// --batch-size auto: the largest batch that fits the run's devices, found by
// trial steps before the run (Lightning's batch-size finder, for every strategy
// and grid). Each trial builds the run's model and optimizer at one size, under
// each device's memory less a margin, runs two steps (the second with AdamW's
// state in place) and the held-out forward, and is thrown away: the run that
// follows starts from its own weights, optimizer and data position, exactly as a
// run started with the chosen size. Note [Batch-size search] in batch_finder.cpp.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/train/train_setup.h"
#include "engine/core/device.h"

namespace fanout::train {

struct BatchTry {
  int64_t rows = 0;  // per replica
  bool fits = false;
};

// The largest n in [lo, hi] with fits(n), where fits holds up to some size and
// fails past it. "power" doubles n from lo while it fits (trying hi when the
// next doubling passes it); "binsearch" then bisects between the last size that
// fitted and the first that did not. 0 when lo does not fit. `tried` gets every
// try in order.
int64_t batch_search(const std::string& mode, int64_t lo, int64_t hi,
                     const std::function<bool(int64_t)>& fits, std::vector<BatchTry>* tried);

// What a trial may use on one device: its capacity (--device-memory, a GPU's own
// memory, or a CPU device's equal share of this machine's) less the margin.
struct DeviceLimit {
  Device device;
  size_t capacity = 0, limit = 0;
  std::string from;  // where the capacity came from, for the line
};
std::vector<DeviceLimit> batch_limits(const std::vector<Device>& devices, size_t device_memory,
                                      double margin);

struct BatchChoice {
  std::string mode;
  double margin = 0;
  int64_t replicas = 1, replica_rows = 0, lo = 1, hi = 1;
  int64_t micro_rows = 0, grad_accum = 1, batch_size = 0;
  std::vector<BatchTry> tried;
  std::vector<DeviceLimit> limits;
  std::vector<size_t> peak;  // the kept size's trial, per entry of limits
  nlohmann::json to_json() const;
  std::string line() const;  // what the run prints
};

// One trial: the first steps of a run set up as `s`, on parts of its own. Returns
// when they fit; an "out of memory" fanout::Error says they do not.
using BatchTrial = std::function<void(const Setup& s)>;
// Every process's verdict on a trial, so all of them search alike (ddp); in one
// process the verdict itself.
using BatchAgree = std::function<bool(bool fits)>;
// Told of each trial as it ends (a line for the user: trials of large batches on
// CPU devices take a while).
using BatchSay = std::function<void(const std::string& line)>;

// --batch-size auto's flags, one line each, before anything is allocated: the
// ones that only shape the search need it; it does not combine with
// --micro-batch-sizes or --grad-accum; --global-batch-size must be reachable by
// accumulating batches split over `replicas`, --max-batch-size hold a row each.
void batch_auto_check(const TrainOptions& o, const std::set<std::string>& given, int64_t replicas);

// Finds the size, and leaves `s` set up for it (setup_batch) and every device's
// cap as it was. Throws one line when not even the smallest batch fits.
BatchChoice batch_size_find(Setup& s, const std::set<std::string>& given, const BatchTrial& trial,
                            const BatchAgree& agree, const BatchSay& say = {});

}  // namespace fanout::train
