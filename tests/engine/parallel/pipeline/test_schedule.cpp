// Pipeline schedules: every generated schedule runs each action of each
// (stage, micro-batch) once, starts nothing before its dependencies finished,
// keeps 1F1B's bound on micro-batches in flight (gpipe: all of them) and has
// the bubble the formula gives (zb1: less). Broken schedules are refused with
// a message that names the stage and the action.

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "engine/parallel/pipeline/schedule.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::parallel;
using fanout::test::error_of;
using fanout::test::has;

namespace {

constexpr PipeSchedule kAll[] = {PipeSchedule::gpipe, PipeSchedule::one_f_one_b, PipeSchedule::zb1};
constexpr int kStages[] = {1, 2, 3, 4, 5};
constexpr int kMicro[] = {1, 2, 3, 4, 8};

constexpr ActionKind F = ActionKind::forward, B = ActionKind::backward,
                     I = ActionKind::backward_input, W = ActionKind::backward_weight;

int count_of(const std::vector<Action>& list, Action a) {
  return static_cast<int>(std::count(list.begin(), list.end(), a));
}

int position(const std::vector<Action>& list, Action a) {
  const auto it = std::find(list.begin(), list.end(), a);
  return it == list.end() ? -1 : static_cast<int>(it - list.begin());
}

double cost(const StageCosts& c, ActionKind k) {
  if (k == F) return c.forward;
  if (k == B) return c.backward;
  return k == I ? c.backward_input : c.backward_weight;
}

struct At {
  int stage, pos;
};

// The dependencies of stage s's action a, written out from the rules in
// schedule.h, as positions in the schedule's lists.
std::vector<At> dependencies(const Schedule& sc, int s, Action a) {
  const auto find = [&](int stage, ActionKind k) {
    return At{stage, position(sc.actions[stage], {k, a.micro})};
  };
  if (a.kind == F) return s == 0 ? std::vector<At>{} : std::vector<At>{find(s - 1, F)};
  if (a.kind == W) return {find(s, I)};
  std::vector<At> out{find(s, F)};
  if (s + 1 < sc.stages) {
    const At b = find(s + 1, B);
    out.push_back(b.pos >= 0 ? b : find(s + 1, I));
  }
  return out;
}

// Most micro-batches on stage s, at the start of any of its F's, whose F has
// started and whose last backward (B, or W) has not finished: from the times.
int peak_from_times(const Schedule& sc, const ScheduleSim& sim, const StageCosts& c, int s) {
  const std::vector<Action>& list = sc.actions[s];
  int peak = 0;
  for (size_t p = 0; p < list.size(); ++p) {
    if (list[p].kind != F) continue;
    const double t = sim.start[s][p];
    int n = 0;
    for (int m = 0; m < sc.micro_batches; ++m) {
      int last = position(list, {B, m});
      if (last < 0) last = position(list, {W, m});
      const double end = sim.start[s][last] + cost(c, list[last].kind);
      n += sim.start[s][position(list, {F, m})] <= t && end > t;
    }
    peak = std::max(peak, n);
  }
  return peak;
}

}  // namespace

// ---------------------------------------------------------------------------
// Generated schedules

TEST_CASE("every schedule runs each forward and backward once per stage and micro-batch") {
  for (PipeSchedule kind : kAll)
    for (int K : kStages)
      for (int M : kMicro) {
        INFO(pipe_schedule_name(kind) << " K=" << K << " M=" << M);
        const Schedule sc = make_schedule(kind, K, M);
        REQUIRE(sc.actions.size() == static_cast<size_t>(K));
        const bool split = kind == PipeSchedule::zb1;
        for (int s = 0; s < K; ++s) {
          CHECK(sc.actions[s].size() == static_cast<size_t>((split ? 3 : 2) * M));
          for (int m = 0; m < M; ++m) {
            INFO("s=" << s << " m=" << m);
            CHECK(count_of(sc.actions[s], {F, m}) == 1);
            CHECK(count_of(sc.actions[s], {B, m}) == (split ? 0 : 1));
            CHECK(count_of(sc.actions[s], {I, m}) == (split ? 1 : 0));
            CHECK(count_of(sc.actions[s], {W, m}) == (split ? 1 : 0));
          }
        }
      }
}

TEST_CASE("no simulated action starts before its dependencies and its stage's last action end") {
  StageCosts odd;  // uneven costs move the times apart
  odd.forward = 1.5, odd.backward = 2.25, odd.backward_input = 0.75, odd.backward_weight = 3;
  for (const StageCosts& c : {StageCosts{}, odd})
    for (PipeSchedule kind : kAll)
      for (int K : kStages)
        for (int M : kMicro) {
          INFO(pipe_schedule_name(kind)
               << " K=" << K << " M=" << M << " forward cost " << c.forward);
          const Schedule sc = make_schedule(kind, K, M);
          const ScheduleSim sim = simulate_schedule(sc, c);
          for (int s = 0; s < K; ++s)
            for (size_t p = 0; p < sc.actions[s].size(); ++p) {
              const Action a = sc.actions[s][p];
              INFO("stage " << s << ": " << action_text(a));
              CHECK(sim.finish[s][p] == sim.start[s][p] + cost(c, a.kind));
              if (p > 0) CHECK(sim.start[s][p] >= sim.finish[s][p - 1]);
              for (At d : dependencies(sc, s, a)) {
                REQUIRE(d.pos >= 0);
                CHECK(sim.start[s][p] >= sim.finish[d.stage][d.pos]);
              }
            }
        }
}

TEST_CASE("peak in flight: 1f1b min(K - s, M), gpipe M, zb1 at most 1f1b's") {
  for (PipeSchedule kind : kAll)
    for (int K : kStages)
      for (int M : kMicro) {
        INFO(pipe_schedule_name(kind) << " K=" << K << " M=" << M);
        const Schedule sc = make_schedule(kind, K, M);
        const ScheduleSim sim = simulate_schedule(sc);
        REQUIRE(sim.peak_in_flight.size() == static_cast<size_t>(K));
        for (int s = 0; s < K; ++s) {
          CAPTURE(s);
          CHECK(sim.peak_in_flight[s] == peak_from_times(sc, sim, StageCosts{}, s));
          const int bound = std::min(K - s, M);
          if (kind == PipeSchedule::gpipe) CHECK(sim.peak_in_flight[s] == M);
          if (kind == PipeSchedule::one_f_one_b) CHECK(sim.peak_in_flight[s] == bound);
          if (kind == PipeSchedule::zb1) CHECK(sim.peak_in_flight[s] <= bound);
        }
      }
}

TEST_CASE("a micro-batch stays in flight until its W, not its I") {
  // One stage: F1 runs before W0, so micro-batches 0 and 1 are both held.
  const Schedule late{PipeSchedule::zb1, 1, 2, {{{F, 0}, {I, 0}, {F, 1}, {W, 0}, {I, 1}, {W, 1}}}};
  CHECK(simulate_schedule(late).peak_in_flight == std::vector<int>{2});
  const Schedule early{PipeSchedule::zb1, 1, 2, {{{F, 0}, {I, 0}, {W, 0}, {F, 1}, {I, 1}, {W, 1}}}};
  CHECK(simulate_schedule(early).peak_in_flight == std::vector<int>{1});
  CHECK(simulate_schedule(early).bubble == 0);
}

TEST_CASE("gpipe and 1f1b bubbles follow the formula, zb1's is smaller") {
  for (int K : kStages)
    for (int M : kMicro) {
      INFO("K=" << K << " M=" << M);
      const double formula = bubble_formula(K, M);
      const ScheduleSim g = simulate_schedule(make_schedule(PipeSchedule::gpipe, K, M));
      const ScheduleSim o = simulate_schedule(make_schedule(PipeSchedule::one_f_one_b, K, M));
      const ScheduleSim z = simulate_schedule(make_schedule(PipeSchedule::zb1, K, M));
      CHECK(std::abs(g.bubble - formula) < 1e-12);
      CHECK(std::abs(o.bubble - formula) < 1e-12);
      CHECK(g.makespan == 3 * (M + K - 1));
      if (K == 1) CHECK(z.bubble == 0);
      if (K >= 2) CHECK(z.bubble < o.bubble);
      // The least any schedule within 1F1B's per-stage bound reaches
      // (Note [zb1 by greedy]).
      CHECK(z.makespan == 3 * M + 2 * (K - 1));
    }
  CHECK(bubble_formula(4, 8) == doctest::Approx(3.0 / 11));
  CHECK(bubble_formula(1, 5) == 0);
}

TEST_CASE("the gpipe and 1f1b bubble formula holds for any forward and backward costs") {
  for (double backward : {0.5, 3.0}) {
    StageCosts c;
    c.backward = backward;
    for (PipeSchedule kind : {PipeSchedule::gpipe, PipeSchedule::one_f_one_b}) {
      const ScheduleSim sim = simulate_schedule(make_schedule(kind, 4, 3), c);
      CHECK(std::abs(sim.bubble - bubble_formula(4, 3)) < 1e-12);
    }
  }
}

TEST_CASE("1f1b warms up with K - s - 1 forwards and runs backwards in micro-batch order") {
  const Schedule sc = make_schedule(PipeSchedule::one_f_one_b, 3, 4);
  CHECK(sc.actions[0] ==
        std::vector<Action>{{F, 0}, {F, 1}, {F, 2}, {B, 0}, {F, 3}, {B, 1}, {B, 2}, {B, 3}});
  CHECK(sc.actions[2] ==
        std::vector<Action>{{F, 0}, {B, 0}, {F, 1}, {B, 1}, {F, 2}, {B, 2}, {F, 3}, {B, 3}});
  const Schedule g = make_schedule(PipeSchedule::gpipe, 2, 3);
  CHECK(g.actions[1] == std::vector<Action>{{F, 0}, {F, 1}, {F, 2}, {B, 2}, {B, 1}, {B, 0}});
}

TEST_CASE("schedule names round-trip and bad sizes are refused") {
  for (PipeSchedule kind : kAll) CHECK(pipe_schedule_parse(pipe_schedule_name(kind)) == kind);
  CHECK(std::string(pipe_schedule_name(PipeSchedule::one_f_one_b)) == "1f1b");
  CHECK(!pipe_schedule_parse("1F1B"));
  CHECK(!pipe_schedule_parse(""));
  CHECK(std::string(action_kind_letter(I)) + action_kind_letter(W) == "IW");
  CHECK(has(error_of([] { make_schedule(PipeSchedule::gpipe, 0, 4); }), "at least 1 stage"));
  CHECK(has(error_of([] { make_schedule(PipeSchedule::zb1, 2, 0); }), "at least 1 micro-batch"));
  CHECK(has(error_of([] {
              StageCosts c;
              c.backward_weight = 0;
              simulate_schedule(make_schedule(PipeSchedule::zb1, 2, 2), c);
            }),
            "costs must be positive"));
}

// ---------------------------------------------------------------------------
// Refusals

namespace {

// 1f1b with K = 2, M = 2, then edited by each case.
Schedule small() {
  return make_schedule(PipeSchedule::one_f_one_b, 2, 2);
}

void erase(std::vector<Action>& list, Action a) {
  list.erase(std::find(list.begin(), list.end(), a));
}

}  // namespace

TEST_CASE("a schedule that misses, repeats or mixes an action is refused naming it") {
  CHECK_NOTHROW(check_schedule(small()));

  Schedule missing = small();
  erase(missing.actions[1], {B, 1});
  const std::string no_b = error_of([&] { check_schedule(missing); });
  CHECK(has(no_b, "stage 1"));
  CHECK(has(no_b, "backward of micro-batch 1 is missing"));

  Schedule twice = small();
  twice.actions[0].push_back({F, 0});
  const std::string two_f = error_of([&] { check_schedule(twice); });
  CHECK(has(two_f, "stage 0: F0 appears twice"));

  Schedule mixed = small();
  mixed.actions[0].push_back({I, 1});
  CHECK(has(error_of([&] { check_schedule(mixed); }), "stage 0: micro-batch 1 mixes B1 with I1"));

  Schedule half = make_schedule(PipeSchedule::zb1, 2, 2);
  erase(half.actions[0], {W, 1});
  CHECK(has(error_of([&] { check_schedule(half); }), "stage 0: I1 has no W1"));

  Schedule no_f = small();
  erase(no_f.actions[1], {F, 0});
  CHECK(has(error_of([&] { check_schedule(no_f); }), "stage 1: F0 is missing"));
}

TEST_CASE("a schedule with a micro-batch out of range or the wrong shape is refused") {
  Schedule past = small();
  past.actions[1].push_back({F, 2});
  const std::string msg = error_of([&] { check_schedule(past); });
  CHECK(has(msg, "stage 1: F2 is out of range"));
  CHECK(has(msg, "2 micro-batches"));

  Schedule negative = small();
  negative.actions[0][0].micro = -1;
  CHECK(has(error_of([&] { check_schedule(negative); }), "stage 0: F-1 is out of range"));

  Schedule shape = small();
  shape.actions.pop_back();
  CHECK(has(error_of([&] { check_schedule(shape); }), "lists actions for 1 stages, it has 2"));
  // simulate_schedule checks too.
  CHECK(has(error_of([&] { simulate_schedule(past); }), "out of range"));
}

TEST_CASE("a schedule that deadlocks is refused naming each stuck stage and its wait") {
  // Stage 0 runs F1 only after B0, which waits (through stage 1's B0) for stage
  // 1's F1, which waits for stage 0's F1: a cycle across the two stages.
  Schedule cyclic = small();
  cyclic.actions[0] = {{F, 0}, {B, 0}, {F, 1}, {B, 1}};
  cyclic.actions[1] = {{F, 0}, {F, 1}, {B, 0}, {B, 1}};
  const std::string msg = error_of([&] { check_schedule(cyclic); });
  CHECK(has(msg, "deadlock"));
  CHECK(has(msg, "stage 0 waits at B0 for B0 on stage 1"));
  CHECK(has(msg, "stage 1 waits at F1 for F1 on stage 0"));
  CHECK(msg.find('\n') == std::string::npos);

  // One stage that lists a backward before its own forward.
  Schedule backwards{PipeSchedule::gpipe, 1, 1, {{{B, 0}, {F, 0}}}};
  CHECK(has(error_of([&] { check_schedule(backwards); }), "stage 0 waits at B0 for F0 on stage 0"));

  // A weight gradient listed before the input gradient it needs.
  Schedule w_first = make_schedule(PipeSchedule::zb1, 1, 1);
  w_first.actions[0] = {{F, 0}, {W, 0}, {I, 0}};
  CHECK(has(error_of([&] { check_schedule(w_first); }), "stage 0 waits at W0 for I0 on stage 0"));

  // The same actions in an order that works are accepted.
  cyclic.actions[0] = {{F, 0}, {F, 1}, {B, 0}, {B, 1}};
  CHECK_NOTHROW(check_schedule(cyclic));
}

// ---------------------------------------------------------------------------
// Drawing

TEST_CASE("the grid draws one line per stage, each action at its start time") {
  const Schedule g = make_schedule(PipeSchedule::gpipe, 2, 2);
  CHECK(schedule_grid(g, simulate_schedule(g)) ==
        "stage 0 |F0|F1|..|..|..|B1   |B0   |\n"
        "stage 1 |..|F0|F1|B1   |B0   |..|..|\n");
  const Schedule z = make_schedule(PipeSchedule::zb1, 2, 2);
  CHECK(schedule_grid(z, simulate_schedule(z)) ==
        "stage 0 |F0|F1|..|I0|W0|..|I1|W1|\n"
        "stage 1 |..|F0|I0|W0|F1|I1|W1|..|\n");
  for (PipeSchedule kind : kAll)
    for (int K : kStages) {
      const Schedule sc = make_schedule(kind, K, 8);
      const std::string grid = schedule_grid(sc, simulate_schedule(sc));
      CAPTURE(grid);
      CHECK(std::count(grid.begin(), grid.end(), '\n') == K);
      // Every line spans the makespan: same length.
      const size_t first = grid.find('\n');
      for (size_t at = 0; at < grid.size(); at = grid.find('\n', at) + 1)
        CHECK(grid.find('\n', at) - at == first);
    }
}
