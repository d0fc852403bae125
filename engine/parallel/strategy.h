#pragma once
// How the engine shares a step among replicas, named once. Strategy is what
// DataParallel does with gradients, weights and optimizer state; a Mode is one
// complete way to run it (strategy, where the loss sits, overlap, one process
// per device), the unit fanout train's flags select, bench measures one row of
// and the walkthrough narrates one section of. Every name, flag line and
// description of a mode lives in this one table (strategy.cpp).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/parallel/pipeline/schedule.h"

namespace fanout::parallel {

enum class Strategy { dp, zero1, zero2, zero3 };
// "dp", "zero1", "zero2", "zero3".
const char* strategy_name(Strategy s);
// zero2 and zero3 keep gradients in per-unit shards (engine/parallel/zero/).
inline bool strategy_shards_grads(Strategy s) {
  return s == Strategy::zero2 || s == Strategy::zero3;
}

enum class LossOn { output, replicas };
// "output", "replicas".
const char* loss_on_name(LossOn l);
// Throws fanout::Error naming `flag` and the choices.
LossOn loss_on_parse(std::string_view name, std::string_view flag = "--loss-on");

// One value of fanout train's --strategy: the engine's strategy, and whether it
// runs one process per device (ddp is dp across processes; zero1-3 shard over
// processes too when a launcher started them).
struct StrategyFlag {
  Strategy strategy = Strategy::dp;
  bool processes = false;  // ddp
  bool operator==(const StrategyFlag&) const = default;
};
// "dp", "zero1", "zero2", "zero3", "ddp"; nullopt for anything else.
std::optional<StrategyFlag> strategy_flag_find(std::string_view name);
// The same, throwing fanout::Error naming the choices for anything else.
StrategyFlag strategy_flag_parse(std::string_view name);
// "dp, zero1, zero2, zero3 or ddp".
const char* strategy_flag_choices();

struct Mode {
  std::string name;  // dp, dp-output, dp-overlap, zero1, zero2, zero3, ddp, pp-gpipe, ...
  Strategy strategy;
  LossOn loss_on;
  bool overlap;
  bool processes;     // one process per device (ddp)
  std::string title;  // the walkthrough's heading for it
  // A pipeline over the devices (one stage each) under this schedule, or none.
  std::optional<PipeSchedule> pipeline = std::nullopt;
  // Tensor parallelism: the most of a stage's devices (all of them without a
  // pipeline) that divide the model split each of its weight matrices, the rest
  // are data-parallel replicas; `stages` then fixes the pipeline's stage count
  // (0: one per device; devices it does not divide run one stage).
  bool tensor = false;
  int stages = 0;
};
// Every mode, in the order bench's `all` runs them.
const std::vector<Mode>& modes();
// nullptr when no mode has that name.
const Mode* mode_find(std::string_view name);
// "dp, dp-output, dp-overlap, zero1, zero2, zero3, ddp, pp-gpipe, pp-1f1b, pp-zb1, tp, pp-tp".
std::string mode_names();
// The `fanout train` flags that run the mode: "--strategy dp --loss-on output";
// a pipeline's stage count is the number of devices: "--pp N --pp-schedule 1f1b".
std::string mode_flags(const Mode& mode);

}  // namespace fanout::parallel
