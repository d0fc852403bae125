#pragma once
// Held-out evaluations of a training run and their history: the best loss, its
// step, and the evaluations since it improved (--save-best, --early-stop).

#include <cstdint>
#include <string>

#include "apps/data/data_loader.h"
#include "apps/train/train_setup.h"
#include "apps/train/training.h"
#include "engine/distributed/process_group.h"

namespace fanout::train {

// One held-out evaluation: the mean loss over `batches` batches, `tokens` of them counted.
struct EvalResult {
  double loss = 0;
  int64_t batches = 0, tokens = 0;
  // "held-out loss 2.1234 over 4 batches (8192 tokens)"
  std::string str() const;
};

// The run's held-out batches, in order, unshuffled: what every evaluation reads.
data::DataLoader held_out_loader(const Setup& s);

// The run's held-out data under the engine (every rank takes part: it is collective).
EvalResult evaluate_held_out(Training& t, const Setup& s, distributed::ProcessGroup* group);

// Note [Held-out history]: the best held-out loss, its step and the evaluations
// since it improved travel in trainer_state.json, so a resumed run keeps best/ and
// stops early exactly where the uninterrupted run would. Losses measured on other
// held-out data (--val-data or --val-batches given anew) are not comparable: the
// history then starts over. final/ is written before the end-of-run evaluation
// (the checkpoint first), so its history stops at the last evaluation in the loop;
// best/ still takes the end-of-run weights when they are the best.
class EvalHistory {
 public:
  // A resumed run's history, when its held-out data are the ones it was measured on.
  explicit EvalHistory(const Setup& s);

  // Records the evaluation after `step`; returns whether it is the best so far.
  bool record(const EvalResult& result, int64_t step);
  // --early-stop's patience has run out.
  bool patience_out(int64_t early_stop) const {
    return early_stop > 0 && evals_since_best >= early_stop;
  }
  // " (best 2.1234 at step 40)"
  std::string best_str() const;

  double best_loss = 0;
  int64_t best_step = -1, evals_since_best = 0;
  EvalResult last;
  int64_t last_step = -1;
  // Why a resumed history started over, or "".
  std::string note;
};

}  // namespace fanout::train
