// Pipeline's step: the schedule replayed by one host thread per (replica,
// stage), boundary tensors crossing devices as copies ordered by events.

#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/core/check.h"
#include "engine/parallel/pipeline/pipeline.h"
#include "engine/parallel/pipeline/pipeline_lane.h"
#include "engine/parallel/scatter.h"
#include "engine/parallel/step_aborted.h"
#include "engine/parallel/tensor/tensor_peers.h"

namespace fanout::parallel {

namespace {
constexpr int kForward = 0, kBackward = 1;  // which boundary buffer a post is about
}  // namespace

void Pipeline::post(int lane, int micro, int kind) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted_[(static_cast<size_t>(lane) * options_.micro_batches + micro) * 2 + kind] = 1;
  }
  cv_.notify_all();
}

// The host waits only until the producing action was queued (its event
// recorded); the device order is the event's.
void Pipeline::wait_posted(int lane, int micro, int kind) {
  std::unique_lock<std::mutex> lock(mu_);
  const size_t at = (static_cast<size_t>(lane) * options_.micro_batches + micro) * 2 + kind;
  cv_.wait(lock, [&] { return posted_[at] != 0 || aborted_; });
  if (posted_[at] == 0) throw StepAborted("stopped: another stage failed in this step");
}

void Pipeline::copy_between(Stream& stream, const Tensor& dst, const Tensor& src) {
  tensor_copy(stream, dst, src);
  if (dst.device() != src.device()) bytes_moved_ += static_cast<int64_t>(src.nbytes());
}

void Pipeline::run_lanes(const std::function<void(int)>& fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(posted_.begin(), posted_.end(), 0);
    stage_done_.assign(options_.stages, 0);
    aborted_ = false;
  }
  for (auto& p : peers_) p->reset();
  try {
    pool_->run_on_devices([&](int lane) {
      try {
        fn(lane);
      } catch (const StepAborted&) {
        // Stopped because another stage failed: that failure is the one reported.
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          aborted_ = true;
        }
        cv_.notify_all();
        for (auto& p : peers_) p->abort();  // tensor peers waiting in a collective
        abort_stores();                     // zero2 replicas waiting for room
        throw;
      }
    });
  } catch (...) {
    recover();
    throw;
  }
}

// After a failed step: every stream drained (its error dropped), so that the
// next step starts clean. Weights are untouched until the update; the gradients
// are the caller's to zero.
void Pipeline::recover() {
  for (auto& st : stages_) {
    try {
      st->compute_stream().synchronize();
    } catch (...) {
    }
  }
  reset_stores();
}

// Buffers for this step's micro-batches: tokens on first stages, targets and
// loss statistics on last stages, boundary buffers on the receiving side.
void Pipeline::prepare(const HostBatch& batch, const std::vector<std::vector<int64_t>>& rows) {
  const int K = options_.stages, M = options_.micro_batches;  // the most any step uses
  for (int li = 0; li < static_cast<int>(lanes_.size()); ++li) {
    const int s = pos(li).stage, d = pos(li).replica;
    Lane& ln = *lanes_[li];
    PipeStage& st = *stages_[li];
    const int64_t most = *std::max_element(rows[d].begin(), rows[d].end());
    // The same slots for evaluation (which uses the first): nothing reallocated
    // between training steps and evaluations.
    st.reserve_slots(slots_[s], most, batch.T, options_.schedule == PipeSchedule::zb1);
    ln.layout(rows[d], batch.T, st.hidden_size(), s > 0, s < K - 1, s == K - 1, M);
  }
}

LossStats Pipeline::forward_backward(const HostBatch& batch, int32_t ignore_index,
                                     double normalizer, bool last) {
  return step(batch, ignore_index, normalizer, true, last);
}

LossStats Pipeline::evaluate(const HostBatch& batch, int32_t ignore_index) {
  return step(batch, ignore_index, 1.0, false, false);
}

LossStats Pipeline::step(const HostBatch& batch, int32_t ignore_index, double normalizer,
                         bool backward, bool last) {
  const bool overlap = backward && last && options_.overlap;
  const int K = options_.stages, D = replicas_;
  // Forward only, a smaller batch streams in fewer micro-batches.
  const int M = backward
                    ? options_.micro_batches
                    : static_cast<int>(std::clamp<int64_t>(batch.B / D, 1, options_.micro_batches));
  FANOUT_CHECK(batch.B / D >= M, "--micro-batches ", M, " needs at least ", M,
               " rows per pipeline replica; the batch has ", batch.B, " rows for ", D,
               D == 1 ? " replica" : " replicas");
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int64_t>> rows(D);
  std::vector<int64_t> per_replica = even_split(batch.B, D);
  for (int d = 0; d < D; ++d) rows[d] = even_split(per_replica[d], M);
  prepare(batch, rows);
  reduced_ = false;
  run_lanes([&](int li) {
    const int s = pos(li).stage, d = pos(li).replica;
    int64_t row0 = 0;
    for (int e = 0; e < d; ++e) row0 += per_replica[e];
    lanes_[li]->upload(stages_[li]->compute_stream(), batch, row0);
    run_actions(li, rows[d], batch.T, ignore_index, static_cast<float>(normalizer), backward);
    if (s == K - 1) lanes_[li]->read_stats(stages_[li]->compute_stream());
    if (overlap) stage_done(s);
  });
  if (backward) finish_stores();
  reduced_ = overlap;
  LossStats total;
  for (int d = 0; d < D; ++d) {  // every tensor rank computes the same loss: rank 0's
    const Lane& last = *lanes_[index(K - 1, d)];
    total.loss_sum += last.loss.loss_sum;
    total.count += last.loss.count;
  }
  step_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return total;
}

void Pipeline::run_actions(int li, const std::vector<int64_t>& rows, int64_t T,
                           int32_t ignore_index, float normalizer, bool backward) {
  const int K = options_.stages, M = static_cast<int>(rows.size()), TP = options_.tensor;
  const int s = pos(li).stage, d = pos(li).replica;
  Lane& ln = *lanes_[li];
  PipeStage& st = *stages_[li];
  Stream& stream = st.compute_stream();
  std::vector<Action> forwards;
  for (int m = 0; m < M; ++m) forwards.push_back({ActionKind::forward, m});
  const std::vector<Action>& actions = backward ? schedule_.actions[s] : forwards;
  // Activation slots: taken by a forward, given back by the micro-batch's last
  // backward action (one slot, reused, when nothing goes backward).
  std::vector<int> free_slots, slot_of(M, -1);
  for (int i = (backward ? slots_[s] : 1) - 1; i >= 0; --i) free_slots.push_back(i);
  for (const Action& a : actions) {
    if (options_.fault_hook) options_.fault_hook(s, d, a);
    if (options_.delay_hook) options_.delay_hook(stream, s, d, a);
    const int m = a.micro;
    // The action's span on the stage's lane starts after the waits for its
    // input: the trace shows the bubbles as gaps.
    std::optional<StreamSpan> span;
    if (a.kind == ActionKind::forward) {
      FANOUT_ASSERT(!free_slots.empty(), "stage ", s, ": no free activation slot for F", m);
      slot_of[m] = backward ? free_slots.back() : free_slots.front();
      if (backward) free_slots.pop_back();
      st.use_slot(slot_of[m]);
      Tensor in = ln.tokens(m);
      if (s > 0) {
        wait_posted(li, m, kForward);
        ln.fwd_event[m]->wait(stream);
        in = ln.fwd_in(m);
      }
      span.emplace(stream, action_text(a));
      st.stage_forward(in, rows[m], T, ln.targets(m), ln.stats(m), ignore_index);
      if (s < K - 1) {
        Lane& next = *lanes_[li + TP];
        copy_between(stream, next.fwd_in(m), st.stage_output());
        next.fwd_event[m]->record(stream);
        post(li + TP, m, kForward);
      }
      continue;
    }
    st.use_slot(slot_of[m]);
    if (a.kind == ActionKind::backward_weight) {
      span.emplace(stream, action_text(a));
      st.backward_weight();
    } else {
      Tensor dout;
      if (s < K - 1) {
        wait_posted(li, m, kBackward);
        ln.bwd_event[m]->wait(stream);
        dout = ln.bwd_in(m);
      }
      if (zero2()) arm_store(s);  // Note [zero2 in a pipeline]
      span.emplace(stream, action_text(a));
      st.stage_backward(dout, normalizer, a.kind == ActionKind::backward_input);
      if (s > 0) {
        Lane& prev = *lanes_[li - TP];
        copy_between(stream, prev.bwd_in(m), st.stage_input_grad());
        prev.bwd_event[m]->record(stream);
        post(li - TP, m, kBackward);
      }
    }
    if (a.kind != ActionKind::backward_input) free_slots.push_back(slot_of[m]);
  }
  stream.synchronize();
}

}  // namespace fanout::parallel
