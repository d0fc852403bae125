#include "engine/parallel/pipeline/schedule.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "engine/core/check.h"

namespace fanout::parallel {

const char* pipe_schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::gpipe:
      return "gpipe";
    case PipeSchedule::one_f_one_b:
      return "1f1b";
    case PipeSchedule::zb1:
      return "zb1";
  }
  return "?";
}

std::optional<PipeSchedule> pipe_schedule_parse(std::string_view name) {
  for (PipeSchedule s : {PipeSchedule::gpipe, PipeSchedule::one_f_one_b, PipeSchedule::zb1})
    if (name == pipe_schedule_name(s)) return s;
  return std::nullopt;
}

const char* action_kind_letter(ActionKind k) {
  switch (k) {
    case ActionKind::forward:
      return "F";
    case ActionKind::backward:
      return "B";
    case ActionKind::backward_input:
      return "I";
    case ActionKind::backward_weight:
      return "W";
  }
  return "?";
}

std::string action_text(const Action& a) {
  std::string out = action_kind_letter(a.kind);
  return out += std::to_string(a.micro);
}

// ---------------------------------------------------------------------------
// Generators

namespace {

// 1F1B on stage s: warm-up forwards, then one forward and one backward in turn
// while forwards remain, then the remaining backwards (`bwd`: B, or zb1's I).
std::vector<Action> one_f_one_b_order(int K, int M, int s, ActionKind bwd) {
  const int warmup = std::min(K - s - 1, M);
  std::vector<Action> order;
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back({ActionKind::forward, f});
  for (; f < M; ++f, ++b) {
    order.push_back({ActionKind::forward, f});
    order.push_back({bwd, b});
  }
  for (; b < M; ++b) order.push_back({bwd, b});
  return order;
}

// Note [zb1 by greedy]
// ZB-H1 keeps 1F1B's order of forwards and input-gradient backwards (I) and
// fills the gaps with the weight-gradient backwards (W), which no other stage
// waits for. We derive each stage's list by a list-scheduler over the unit
// costs F = I = W = 1: at each whole time, a free stage runs its next F or I if
// that action's dependencies have finished and, for an F, no more than
// min(K - s, M) micro-batches would be in flight (F run, W not run: 1F1B's
// peak); otherwise its oldest pending W; otherwise it waits. The W's left at
// the end run last. Every action starts at a whole time, so replaying the
// lists (simulate_schedule, default costs) gives back the greedy's times.
// Its makespan is 3M + 2(K - 1) units against 1F1B's 3M + 3(K - 1), and no
// schedule under the same per-stage bound does better: the last stage holds
// one micro-batch, so it runs F I W strictly in turn, and after its last I
// come K - 1 more I's and stage 0's last W. The paper's ZB-H1 reaches
// 3M + (K - 1) because it bounds memory in bytes (a W holds less than a B)
// and lets later stages keep more micro-batches than K - s.
struct ZbStage {
  std::vector<Action> order;  // 1F1B's F and I
  size_t next = 0;
  int f_done = 0, i_done = 0, w_done = 0;  // run so far (each in micro-batch order)
  std::vector<Action> out;
};

constexpr int kNever = INT_MAX;

// What stage s starts at time t, if anything. f_end / i_end: [stage][micro]
// finish times of the F's and I's run so far, kNever for the others.
std::optional<Action> zb1_pick(const ZbStage& st, int s, int K, int M, int t,
                               const std::vector<std::vector<int>>& f_end,
                               const std::vector<std::vector<int>>& i_end) {
  if (st.next < st.order.size()) {
    const Action a = st.order[st.next];
    const bool ready =
        a.kind == ActionKind::forward
            ? (s == 0 || f_end[s - 1][a.micro] <= t) && st.f_done - st.w_done < std::min(K - s, M)
            : f_end[s][a.micro] <= t && (s == K - 1 || i_end[s + 1][a.micro] <= t);
    if (ready) return a;
  }
  if (st.w_done < st.i_done) return Action{ActionKind::backward_weight, st.w_done};
  return std::nullopt;
}

std::vector<std::vector<Action>> zb1_actions(int K, int M) {
  std::vector<ZbStage> st(K);
  for (int s = 0; s < K; ++s) st[s].order = one_f_one_b_order(K, M, s, ActionKind::backward_input);
  std::vector<std::vector<int>> f_end(K, std::vector<int>(M, kNever)), i_end = f_end;
  int left = 3 * K * M;
  for (int t = 0; left > 0; ++t) {
    // A time where no stage starts anything would repeat forever.
    FANOUT_ASSERT(t < 3 * K * M, "zb1 greedy stalls at time ", t);
    for (int s = 0; s < K; ++s) {
      const std::optional<Action> a = zb1_pick(st[s], s, K, M, t, f_end, i_end);
      if (!a) continue;
      ZbStage& z = st[s];
      if (a->kind == ActionKind::forward) ++z.f_done, ++z.next, f_end[s][a->micro] = t + 1;
      if (a->kind == ActionKind::backward_input) ++z.i_done, ++z.next, i_end[s][a->micro] = t + 1;
      if (a->kind == ActionKind::backward_weight) ++z.w_done;
      z.out.push_back(*a);
      --left;
    }
  }
  std::vector<std::vector<Action>> out;
  for (ZbStage& z : st) out.push_back(std::move(z.out));
  return out;
}

}  // namespace

Schedule make_schedule(PipeSchedule kind, int stages, int micro_batches) {
  FANOUT_CHECK(stages >= 1, "a pipeline needs at least 1 stage, got ", stages);
  FANOUT_CHECK(micro_batches >= 1, "a pipeline needs at least 1 micro-batch, got ", micro_batches);
  const int K = stages, M = micro_batches;
  Schedule out{kind, K, M, {}};
  if (kind == PipeSchedule::zb1) {
    out.actions = zb1_actions(K, M);
    return out;
  }
  for (int s = 0; s < K; ++s) {
    if (kind == PipeSchedule::one_f_one_b) {
      out.actions.push_back(one_f_one_b_order(K, M, s, ActionKind::backward));
      continue;
    }
    std::vector<Action> a;
    for (int m = 0; m < M; ++m) a.push_back({ActionKind::forward, m});
    for (int m = M - 1; m >= 0; --m) a.push_back({ActionKind::backward, m});
    out.actions.push_back(std::move(a));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Checking and replay

namespace {

// Where each (stage, micro-batch)'s actions sit in the stage's list, -1 if
// absent: [stage][micro].
struct ActionIndex {
  std::vector<std::vector<int>> f, b, i, w;
  // The backward the stage before waits for: B, or I.
  int bwd(int s, int m) const { return b[s][m] >= 0 ? b[s][m] : i[s][m]; }
};

int& index_slot(ActionIndex& ix, int s, const Action& a) {
  switch (a.kind) {
    case ActionKind::forward:
      return ix.f[s][a.micro];
    case ActionKind::backward:
      return ix.b[s][a.micro];
    case ActionKind::backward_input:
      return ix.i[s][a.micro];
    case ActionKind::backward_weight:
      break;
  }
  return ix.w[s][a.micro];
}

// One F, and one B or one I and one W, for micro-batch m on stage s.
void check_complete(const ActionIndex& ix, int s, int m) {
  const std::string at = "pipeline schedule, stage " + std::to_string(s) + ": ";
  const std::string ms = std::to_string(m);
  FANOUT_CHECK(ix.f[s][m] >= 0, at, "F", ms, " is missing");
  const bool b = ix.b[s][m] >= 0, i = ix.i[s][m] >= 0, w = ix.w[s][m] >= 0;
  FANOUT_CHECK(!(b && (i || w)), at, "micro-batch ", ms, " mixes B", ms, " with ", i ? "I" : "W",
               ms, ": a backward is either B, or I and W");
  FANOUT_CHECK(b || i || w, at, "the backward of micro-batch ", ms, " is missing (no B", ms,
               ", nor I", ms, " and W", ms, ")");
  FANOUT_CHECK(b || (i && w), at, i ? "I" : "W", ms, " has no ", i ? "W" : "I", ms);
}

// Checks the shape, the ranges and that each action appears once.
ActionIndex index_actions(const Schedule& sc) {
  const int K = sc.stages, M = sc.micro_batches;
  FANOUT_CHECK(K >= 1 && M >= 1, "pipeline schedule needs at least 1 stage and 1 micro-batch, got ",
               K, " stages and ", M, " micro-batches");
  FANOUT_CHECK(sc.actions.size() == static_cast<size_t>(K), "pipeline schedule lists actions for ",
               sc.actions.size(), " stages, it has ", K);
  const std::vector<std::vector<int>> none(K, std::vector<int>(M, -1));
  ActionIndex ix{none, none, none, none};
  for (int s = 0; s < K; ++s) {
    for (size_t p = 0; p < sc.actions[s].size(); ++p) {
      const Action& a = sc.actions[s][p];
      FANOUT_CHECK(a.micro >= 0 && a.micro < M, "pipeline schedule, stage ", s, ": ",
                   action_text(a), " is out of range: there are ", M, " micro-batches (0..", M - 1,
                   ")");
      int& slot = index_slot(ix, s, a);
      FANOUT_CHECK(slot < 0, "pipeline schedule, stage ", s, ": ", action_text(a),
                   " appears twice");
      slot = static_cast<int>(p);
    }
    for (int m = 0; m < M; ++m) check_complete(ix, s, m);
  }
  return ix;
}

struct Dep {
  int stage, pos;  // sc.actions[stage][pos]
};

// The actions that must finish before `a` on stage s starts.
std::vector<Dep> deps_of(const Schedule& sc, const ActionIndex& ix, int s, const Action& a) {
  const int m = a.micro;
  switch (a.kind) {
    case ActionKind::forward:
      if (s == 0) return {};
      return {{s - 1, ix.f[s - 1][m]}};
    case ActionKind::backward:
    case ActionKind::backward_input:
      if (s == sc.stages - 1) return {{s, ix.f[s][m]}};
      return {{s, ix.f[s][m]}, {s + 1, ix.bwd(s + 1, m)}};
    case ActionKind::backward_weight:
      break;
  }
  return {{s, ix.i[s][m]}};
}

double cost_of(const StageCosts& c, ActionKind k) {
  switch (k) {
    case ActionKind::forward:
      return c.forward;
    case ActionKind::backward:
      return c.backward;
    case ActionKind::backward_input:
      return c.backward_input;
    case ActionKind::backward_weight:
      break;
  }
  return c.backward_weight;
}

struct Replay {
  std::vector<std::vector<double>> start, finish;
  std::string stuck;  // the deadlock, "" if every action ran
};

// "stage 0 waits at B0 for B0 on stage 1; ..." for every stage not done.
std::string deadlock_text(const Schedule& sc, const ActionIndex& ix,
                          const std::vector<size_t>& next) {
  std::string out = "pipeline schedule deadlocks, no stage can go on:";
  const char* sep = " ";
  for (int s = 0; s < sc.stages; ++s) {
    if (next[s] == sc.actions[s].size()) continue;
    const Action& a = sc.actions[s][next[s]];
    out += sep + ("stage " + std::to_string(s)) + " waits at " + action_text(a) + " for";
    const char* and_ = " ";
    for (Dep d : deps_of(sc, ix, s, a)) {
      if (d.pos < static_cast<int>(next[d.stage])) continue;  // done
      out +=
          and_ + action_text(sc.actions[d.stage][d.pos]) + " on stage " + std::to_string(d.stage);
      and_ = " and ";
    }
    sep = "; ";
  }
  return out;
}

// Each stage runs its list in order; an action starts once its stage is free
// and its dependencies finished. Stops at a deadlock.
Replay replay(const Schedule& sc, const ActionIndex& ix, const StageCosts& costs) {
  const int K = sc.stages;
  Replay r;
  std::vector<size_t> next(K, 0);
  std::vector<double> free_at(K, 0);
  size_t left = 0;
  for (int s = 0; s < K; ++s) {
    r.start.emplace_back(sc.actions[s].size(), 0.0);
    r.finish.emplace_back(sc.actions[s].size(), 0.0);
    left += sc.actions[s].size();
  }
  while (left > 0) {
    bool moved = false;
    for (int s = 0; s < K; ++s) {
      for (; next[s] < sc.actions[s].size(); ++next[s], --left, moved = true) {
        const Action& a = sc.actions[s][next[s]];
        double at = free_at[s];
        bool ready = true;
        for (Dep d : deps_of(sc, ix, s, a)) {
          ready = ready && d.pos < static_cast<int>(next[d.stage]);
          if (ready) at = std::max(at, r.finish[d.stage][d.pos]);
        }
        if (!ready) break;
        r.start[s][next[s]] = at;
        r.finish[s][next[s]] = free_at[s] = at + cost_of(costs, a.kind);
      }
    }
    if (!moved) {
      r.stuck = deadlock_text(sc, ix, next);
      break;
    }
  }
  return r;
}

}  // namespace

void check_schedule(const Schedule& schedule) {
  const ActionIndex ix = index_actions(schedule);
  const Replay r = replay(schedule, ix, StageCosts{});
  FANOUT_CHECK(r.stuck.empty(), r.stuck);
}

// ---------------------------------------------------------------------------
// Simulation and drawing

namespace {

// Most micro-batches between their F and their last backward (B or W) at once.
int peak_in_flight(const std::vector<Action>& actions) {
  int now = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::forward) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_weight) --now;
  }
  return peak;
}

}  // namespace

ScheduleSim simulate_schedule(const Schedule& schedule, const StageCosts& costs) {
  for (double c : {costs.forward, costs.backward, costs.backward_input, costs.backward_weight})
    FANOUT_CHECK(std::isfinite(c) && c > 0, "pipeline stage costs must be positive, got ", c);
  check_schedule(schedule);
  Replay r = replay(schedule, index_actions(schedule), costs);
  FANOUT_ASSERT(r.stuck.empty(), r.stuck);
  ScheduleSim sim;
  double busy = 0;
  for (int s = 0; s < schedule.stages; ++s) {
    for (size_t p = 0; p < schedule.actions[s].size(); ++p) {
      busy += r.finish[s][p] - r.start[s][p];
      sim.makespan = std::max(sim.makespan, r.finish[s][p]);
    }
    sim.peak_in_flight.push_back(peak_in_flight(schedule.actions[s]));
  }
  sim.bubble = 1 - busy / (schedule.stages * sim.makespan);
  sim.start = std::move(r.start);
  sim.finish = std::move(r.finish);
  return sim;
}

double bubble_formula(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

std::string schedule_grid(const Schedule& schedule, const ScheduleSim& sim) {
  const int K = schedule.stages;
  FANOUT_CHECK(sim.start.size() == schedule.actions.size() && sim.finish.size() == sim.start.size(),
               "schedule_grid: the simulation is of another schedule");
  for (int s = 0; s < K; ++s)
    FANOUT_CHECK(sim.start[s].size() == schedule.actions[s].size() &&
                     sim.finish[s].size() == schedule.actions[s].size(),
                 "schedule_grid: the simulation is of another schedule");
  size_t width = 1;
  for (const auto& stage : schedule.actions)
    for (const Action& a : stage) width = std::max(width, action_text(a).size());
  const std::string idle(width, '.');
  const size_t label = std::to_string(std::max(K - 1, 0)).size();
  const long end = std::lround(sim.makespan);
  std::string out;
  for (int s = 0; s < K; ++s) {
    const std::string num = std::to_string(s);
    out += "stage " + std::string(label - num.size(), ' ') + num + " |";
    long at = 0;  // cells drawn so far
    for (size_t p = 0; p < schedule.actions[s].size(); ++p) {
      const long from = std::max(std::lround(sim.start[s][p]), at);
      const long to = std::max(std::lround(sim.finish[s][p]), from + 1);
      for (; at < from; ++at) out += idle + "|";
      std::string cell = action_text(schedule.actions[s][p]);
      cell.resize((to - from) * (width + 1) - 1, ' ');  // spans its cells and their bars
      out += cell + "|";
      at = to;
    }
    for (; at < end; ++at) out += idle + "|";
    out += "\n";
  }
  return out;
}

}  // namespace fanout::parallel
