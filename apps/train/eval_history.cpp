#include "apps/train/eval_history.h"

#include <algorithm>
#include <cstdio>

#include "apps/data/data_loader.h"
#include "models/llama_model.h"

namespace fanout::train {

std::string EvalResult::str() const {
  char line[128];
  std::snprintf(line, sizeof line, "held-out loss %.4f over %lld batches (%lld tokens)", loss,
                static_cast<long long>(batches), static_cast<long long>(tokens));
  return line;
}

data::DataLoader held_out_loader(const Setup& s) {
  return data::DataLoader(s.val_data, s.micro_rows, s.o.seq_len, s.o.packing == "on", false, 0,
                          models::kIgnoreIndex);
}

EvalResult evaluate_held_out(Training& t, const Setup& s, distributed::ProcessGroup* group) {
  data::DataLoader loader = held_out_loader(s);
  int64_t n = loader.batches_per_epoch();
  if (s.o.val_batches > 0) n = std::min(n, s.o.val_batches);
  double sums[2] = {0, 0};  // loss sum, counted tokens
  for (int64_t i = 0; i < n; ++i) {
    data::Batch b = loader.next();  // must outlive hb, which points into it
    parallel::HostBatch hb = s.ddp.batch_rows(b);
    if (hb.B == 0) continue;
    parallel::LossStats st = t.evaluate(hb);
    sums[0] += st.loss_sum, sums[1] += static_cast<double>(st.count);
  }
  if (group) group->all_reduce_host(sums, 2);
  return {sums[1] > 0 ? sums[0] / sums[1] : 0.0, n, static_cast<int64_t>(sums[1])};
}

EvalHistory::EvalHistory(const Setup& s) {
  if (!s.resume || s.resume->state.best_step < 0) return;
  TrainOptions saved;
  train_options_merge(saved, s.resume->state.flags, {});
  const TrainOptions& o = s.o;
  if (saved.val_data == o.val_data && saved.val_batches == o.val_batches &&
      saved.val_split == o.val_split) {
    best_loss = s.resume->state.best_val_loss;
    best_step = s.resume->state.best_step;
    evals_since_best = s.resume->state.evals_since_best;
  } else {
    note =
        "the held-out data or --val-batches changed: the best held-out loss and "
        "--early-stop's count start over";
  }
}

bool EvalHistory::record(const EvalResult& result, int64_t step) {
  last = result;
  last_step = step;
  const bool better = best_step < 0 || result.loss < best_loss;
  if (better) {
    best_loss = result.loss, best_step = step, evals_since_best = 0;
  } else {
    ++evals_since_best;
  }
  return better;
}

std::string EvalHistory::best_str() const {
  char best[96];
  std::snprintf(best, sizeof best, " (best %.4f at step %lld)", best_loss,
                static_cast<long long>(best_step));
  return best;
}

}  // namespace fanout::train
