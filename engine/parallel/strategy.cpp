#include "engine/parallel/strategy.h"

#include <algorithm>

#include "engine/core/check.h"

namespace fanout::parallel {

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::dp:
      return "dp";
    case Strategy::zero1:
      return "zero1";
    case Strategy::zero2:
      return "zero2";
    case Strategy::zero3:
      return "zero3";
  }
  return "?";
}

const char* loss_on_name(LossOn l) {
  return l == LossOn::output ? "output" : "replicas";
}

LossOn loss_on_parse(std::string_view name, std::string_view flag) {
  if (name == "output") return LossOn::output;
  FANOUT_CHECK(name == "replicas", flag, " must be output or replicas, got '", name, "'");
  return LossOn::replicas;
}

std::optional<StrategyFlag> strategy_flag_find(std::string_view name) {
  for (Strategy s : {Strategy::dp, Strategy::zero1, Strategy::zero2, Strategy::zero3})
    if (name == strategy_name(s)) return StrategyFlag{s, false};
  if (name == "ddp") return StrategyFlag{Strategy::dp, true};
  return std::nullopt;
}

StrategyFlag strategy_flag_parse(std::string_view name) {
  const std::optional<StrategyFlag> flag = strategy_flag_find(name);
  FANOUT_CHECK(flag.has_value(), "--strategy must be ", strategy_flag_choices(), ", got '", name,
               "'");
  return *flag;
}

const char* strategy_flag_choices() {
  return "dp, zero1, zero2, zero3 or ddp";
}

const std::vector<Mode>& modes() {
  // ddp: one process per device, each an in-process dp of one replica whose
  // gradients are all-reduced across the processes, overlapped with backward.
  static const std::vector<Mode> all = {
      {"dp", Strategy::dp, LossOn::replicas, false, false,
       "dp (--strategy dp, the loss on the replicas): only loss scalars are gathered"},
      {"dp-output", Strategy::dp, LossOn::output, false, false,
       "dp-output (--strategy dp --loss-on output): what nn.DataParallel does"},
      {"dp-overlap", Strategy::dp, LossOn::replicas, true, false,
       "dp-overlap (--strategy dp --overlap): gradient buckets reduced while backward runs"},
      {"zero1", Strategy::zero1, LossOn::replicas, false, false, "zero1: sharded optimizer state"},
      {"zero2", Strategy::zero2, LossOn::replicas, false, false,
       "zero2: gradients sharded too, reduced unit by unit during backward"},
      {"zero3", Strategy::zero3, LossOn::replicas, false, false,
       "zero3: weights sharded too, gathered unit by unit"},
      {"ddp", Strategy::dp, LossOn::replicas, true, true,
       "ddp (--strategy ddp): one process per device, gradients all-reduced"},
      {"pp-gpipe", Strategy::dp, LossOn::replicas, false, false,
       "pp-gpipe (--pp N --pp-schedule gpipe): one stage per device, every forward then every "
       "backward",
       PipeSchedule::gpipe},
      {"pp-1f1b", Strategy::dp, LossOn::replicas, false, false,
       "pp-1f1b (--pp N): one stage per device, a backward as soon as it can run",
       PipeSchedule::one_f_one_b},
      {"pp-zb1", Strategy::dp, LossOn::replicas, false, false,
       "pp-zb1 (--pp N --pp-schedule zb1): the backward split, weight gradients filling the "
       "bubbles",
       PipeSchedule::zb1},
      {"tp", Strategy::dp, LossOn::replicas, false, false,
       "tp (--tp T): every weight matrix split over T devices (attention heads, MLP units, the "
       "vocabulary), an all-reduce after each block",
       std::nullopt, true},
      {"pp-tp", Strategy::dp, LossOn::replicas, false, false,
       "pp-tp (--pp 2 --tp T): two stages, each split over tensor-parallel devices",
       PipeSchedule::one_f_one_b, true, 2},
  };
  return all;
}

const Mode* mode_find(std::string_view name) {
  auto it =
      std::find_if(modes().begin(), modes().end(), [&](const Mode& m) { return name == m.name; });
  return it == modes().end() ? nullptr : &*it;
}

std::string mode_names() {
  std::string out;
  for (const Mode& m : modes()) {
    if (!out.empty()) out += ", ";
    out += m.name;
  }
  return out;
}

std::string mode_flags(const Mode& mode) {
  if (mode.processes) return "--strategy ddp (under fanout launch; overlaps by default)";
  if (mode.tensor) {
    return std::string(mode.pipeline ? "--pp 2 " : "") + "--tp T (T: the most devices" +
           (mode.pipeline ? " of a stage" : "") +
           " that divide the heads, key-value heads and MLP units; the rest data-parallel "
           "replicas)";
  }
  if (mode.pipeline) {
    return std::string("--pp N --pp-schedule ") + pipe_schedule_name(*mode.pipeline) +
           " (N: the devices)";
  }
  std::string out = std::string("--strategy ") + strategy_name(mode.strategy);
  if (mode.loss_on == LossOn::output) out += " --loss-on output";
  if (mode.overlap) out += " --overlap";
  return out;
}

}  // namespace fanout::parallel
