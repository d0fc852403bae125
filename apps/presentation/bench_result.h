#pragma once
// One row of `fanout bench`: a mode's figures as bench measures them, writes
// with --json and the report reads back and draws (bench_svg.h).

#include <string>
#include <vector>

#include "apps/presentation/device_peak.h"
#include "apps/presentation/step_times.h"
#include "engine/core/op_profile.h"
#include "engine/parallel/data_parallel.h"

namespace fanout::presentation {

struct BenchResult {
  std::string mode, devices;
  std::string precision = "fp32", grad_comm = "fp32";
  // tokens/s and step_s from the median timed step; step: every timed step's
  // seconds summarised (its quartiles give the spread).
  double tokens_per_s = 0, step_s = 0, last_loss = 0;
  StepTimes step;
  parallel::PhaseTimes phases;  // mean seconds per step
  parallel::CommBytes comm;     // mean bytes per step, from the engine's counters
  std::vector<DevicePeak> peaks;
  // Why the mode did not run to the end ("" when it did): `fanout bench` prints
  // the reason in its row and goes on with the other modes.
  std::string failed;
  // BenchSetup::profile_kernels: one more step after the timed ones, its device
  // time by kernel class and its wall time (waiting for the devices included).
  OpTimes kernels;
  double kernels_step_s = 0;
  // Pipeline rows: stages and micro-batches, the bubble (the share of the
  // stages' time idle) measured from one traced step, and the schedule's own
  // with equal stage costs (-1 for the other modes).
  int stages = 0, micro_batches = 0;
  double bubble = -1, bubble_schedule = -1;
  int tensor = 0;  // tensor-parallel ranks per stage (0: not a grid row)
  // The host allocator's peak over the timed steps (--offload optimizer's master
  // weights and AdamW state; 0 without).
  size_t host_bytes = 0;
};

}  // namespace fanout::presentation
