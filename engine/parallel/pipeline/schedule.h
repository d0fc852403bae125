#pragma once
// Pipeline schedules as data: for K stages and M micro-batches, the list of
// forward and backward actions each stage runs, in order (gpipe, 1f1b, zb1).
// check_schedule refuses a list that misses, repeats or deadlocks; the
// simulator replays one with per-action costs and measures its bubble and the
// activations each stage holds at once. Host-only: no device, no model.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fanout::parallel {

// gpipe: all forwards, then all backwards (torchgpipe). one_f_one_b: 1F1B,
// PipeDream-flush / Megatron's non-interleaved schedule. zb1: Zero Bubble's
// ZB-H1, 1F1B's memory with the backward split in two (Note [zb1 by greedy]).
enum class PipeSchedule { gpipe, one_f_one_b, zb1 };
// "gpipe", "1f1b", "zb1".
const char* pipe_schedule_name(PipeSchedule s);
std::optional<PipeSchedule> pipe_schedule_parse(std::string_view name);

// backward is the whole backward of a micro-batch; zb1 splits it into
// backward_input (the gradient sent to the stage before) and backward_weight.
enum class ActionKind : uint8_t { forward, backward, backward_input, backward_weight };
// "F", "B", "I", "W".
const char* action_kind_letter(ActionKind k);

struct Action {
  ActionKind kind;
  int micro;  // micro-batch index, 0..M-1
  bool operator==(const Action&) const = default;
};
// "F3", "I0": the letter and the micro-batch, as messages and grids show it.
std::string action_text(const Action& a);

struct Schedule {
  PipeSchedule kind;
  int stages = 0;
  int micro_batches = 0;
  std::vector<std::vector<Action>>
      actions;  // actions[s]: stage s's actions, in the order it runs them
};

// FANOUT_CHECK stages >= 1 and micro_batches >= 1. gpipe runs its backwards in
// reverse, B(M-1)..B0 (torchgpipe's order: the last forward's activations are
// the first freed); 1f1b and zb1 run theirs in micro-batch order.
Schedule make_schedule(PipeSchedule kind, int stages, int micro_batches);

// Refuses (fanout::Error, one line naming the stage and the action) a schedule
// whose shape does not match its stage count, with a micro-batch out of range,
// an action missing or repeated (each (stage, m) has one F and either one B, or
// one I and one W), or that deadlocks. Dependencies: F(s,m) needs F(s-1,m);
// B(s,m) and I(s,m) need F(s,m) and, below the last stage, the B or I of
// (s+1,m); W(s,m) needs I(s,m). Each stage runs its list in order and an action
// starts once its dependencies are done: a deadlock is a state where no stage
// can go on before all are done.
void check_schedule(const Schedule& schedule);

// Time per action on every stage. The defaults are the Zero Bubble paper's
// unit costs: F = I = W and B = I + W.
struct StageCosts {
  double forward = 1, backward = 2, backward_input = 1, backward_weight = 1;
};

struct ScheduleSim {
  double makespan = 0;
  double bubble = 0;                // 1 - (sum of busy time over stages) / (stages * makespan)
  std::vector<int> peak_in_flight;  // per stage: most micro-batches whose F ran but whose last
                                    // backward action (B, or W) did not yet finish
  std::vector<std::vector<double>> start;   // start[s][i]: start time of actions[s][i]
  std::vector<std::vector<double>> finish;  // finish[s][i]: start[s][i] plus the action's cost
};

// Checks the schedule (check_schedule), then replays it: each action starts as
// soon as its stage is free and its dependencies finished. FANOUT_CHECK costs
// positive and finite.
ScheduleSim simulate_schedule(const Schedule& schedule, const StageCosts& costs = {});

// The bubble gpipe and 1f1b have under the default costs: (K - 1) / (M + K - 1).
double bubble_formula(int stages, int micro_batches);

// The schedule drawn as a stage x time grid, one line per stage, each ending in
// '\n': "stage 0 |F0|F1|..|B1   |B0   |". One cell per unit of simulated time,
// as wide as the longest action text; an action spans as many cells as it
// lasts, idle cells are dots. Times are rounded to whole units.
std::string schedule_grid(const Schedule& schedule, const ScheduleSim& sim);

}  // namespace fanout::parallel
