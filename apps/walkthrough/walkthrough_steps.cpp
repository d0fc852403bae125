// What each phase of a narrated step did: forward and backward per replica,
// the reduction, the memory it took, and how the mode compares with the ones
// before it.
#include <algorithm>
#include <cmath>

#include "apps/walkthrough/walkthrough_narrator.h"
#include "engine/core/check.h"

namespace fanout::walkthrough::walk {

using parallel::LossOn;
using parallel::Strategy;

void Narrator::narrate_forward_backward(const ModeSpec& spec, WalkthroughMode& m,
                                        const data::Batch& b, const parallel::LossStats& st,
                                        const PhaseTimes& t, const std::vector<TraceSpan>& spans) {
  int n = static_cast<int>(o_.devices.size());
  int64_t B = b.B, T = b.T;
  bool faithful = spec.loss_on == LossOn::output;
  // scatter
  std::string s = strf("%lld row%s of %lld tokens split over %d device%s ->", (long long)B,
                       B == 1 ? "" : "s", (long long)T, n, n == 1 ? "" : "s");
  for (int r = 0; r < n; ++r) {
    s += strf("%s %s gets %lld row%s", r ? "," : "", dev(r).c_str(), (long long)m.rows[r],
              m.rows[r] == 1 ? "" : "s");
    if (m.rows[r] == 0)
      s += " (idle this step)";
    else
      s += strf(" (%zu bytes%s)", m.scatter_bytes[r], r ? "" : " of token ids");
  }
  line("scatter", s + " in " + ms(t.scatter));
  if (faithful) {
    more(
        strf("the targets (%lld x %lld = %lld bytes) go only to the output device %s, where the "
             "loss is computed",
             (long long)B, (long long)T, (long long)(B * T * 4), dev(0).c_str()));
  } else {
    more(
        "each replica also gets its rows' targets (the same sizes again): it computes its own "
        "loss");
  }
  // replicate
  if (spec.strategy == Strategy::zero3) {
    line("replicate",
         "nothing to broadcast: no device holds the whole weights, each unit is "
         "gathered just before it runs (below)");
  } else if (t.replicate > 0) {
    std::string to;
    for (int r = 1; r < n; ++r) to += (r > 1 ? ", " : "") + dev(r);
    line("replicate",
         strf("broadcast %lld parameters = %s (%lld bytes) from %s to %s in %s", (long long)P_,
              bytes_str(P_ * 4).c_str(), (long long)(P_ * 4), dev(0).c_str(),
              n > 1 ? to.c_str() : "no other device", ms(t.replicate).c_str()));
    more(m.losses.empty()
             ? "the replicas were just built: only " + dev(0) + " holds the initialised weights"
             : "the optimizer changed " + dev(0) + "'s parameters last step");
  } else {
    line("replicate", "nothing to broadcast: every replica's parameters are already current");
  }
  // forward (and the replicas' own loss)
  std::string f;
  for (int r = 0; r < n; ++r) {
    if (m.rows[r] == 0) continue;
    f += strf("%s%s: tokens %s -> logits %s in %s", f.empty() ? "" : "; ", dev(r).c_str(),
              shape({m.rows[r], T}).c_str(), shape({m.rows[r], T, V_}).c_str(),
              us_ms(span_us(spans, lane(r, "compute"), "forward")).c_str());
    if (!faithful) f += " + loss " + us_ms(span_us(spans, lane(r, "compute"), "loss"));
  }
  line("forward", f);
  if (spec.name == "dp-output")
    more(
        "in parallel: one pool thread and one stream per device; each replica's logits stay in "
        "its own activation arena");
  double loss = st.loss_sum / static_cast<double>(st.count);
  if (faithful) {
    size_t crossed = 0;
    std::string from;
    for (int r = 0; r < n; ++r) {
      if (m.rows[r] == 0) continue;
      if (!(o_.devices[r] == o_.devices[0])) crossed += m.rows[r] * T * V_ * 4;
      from += strf("%s%s from %s", from.empty() ? "" : " and ", shape({m.rows[r], T, V_}).c_str(),
                   dev(r).c_str());
    }
    line("gather", "logits " + from + " copied into one " + shape({B, T, V_}) + " f32 buffer on " +
                       dev(0) +
                       strf(" = %zu bytes (%lld*%lld*%lld*4) in ", m.gather_bytes, (long long)B,
                            (long long)T, (long long)V_) +
                       ms(t.gather));
    more(
        strf("%zu of those bytes crossed from other devices; the buffer stays allocated on %s "
             "(tagged comm)",
             crossed, dev(0).c_str()));
    line("loss", strf("cross-entropy on %s: %.4f = %.2f / %lld counted tokens in %s",
                      dev(0).c_str(), loss, st.loss_sum, (long long)st.count, ms(t.loss).c_str()));
    more(
        strf("normalised by the global count %lld: the mean over the whole batch, never a mean "
             "of per-replica means",
             (long long)st.count));
    std::string back;
    for (int r = 0; r < n; ++r)
      if (m.rows[r] > 0)
        back += strf("%s%s %lld row%s (%lld bytes)", back.empty() ? "" : ", ", dev(r).c_str(),
                     (long long)m.rows[r], m.rows[r] == 1 ? "" : "s",
                     (long long)(m.rows[r] * T * V_ * 4));
    more("dlogits " + shape({B, T, V_}) + " computed in place, then sliced back: " + back);
  } else {
    line("loss", strf("%.4f = %.2f / %lld counted tokens: each replica returned {loss sum, token "
                      "count}, 8 bytes, and the host added them up",
                      loss, st.loss_sum, (long long)st.count));
    more(
        strf("no logits are gathered; backward is normalised by the global count %lld, so the "
             "gradients equal dp-output's",
             (long long)st.count));
  }
  // backward
  std::string bw;
  for (int r = 0; r < n; ++r)
    if (m.rows[r] > 0)
      bw += strf("%s%s %s", bw.empty() ? "" : ", ", dev(r).c_str(),
                 us_ms(span_us(spans, lane(r, "compute"), "backward")).c_str());
  line("backward", bw);
  if (spec.name == "dp-output")
    more(
        strf("each replica accumulates d(loss)/d(params) of its rows into its own %s gradient "
             "buffer",
             bytes_str(P_ * 4).c_str()));
}

void Narrator::narrate_reduce(const ModeSpec& spec, WalkthroughMode& m, DataParallel& dp,
                              const PhaseTimes& t, int64_t step_t0,
                              const std::vector<TraceSpan>& spans,
                              const std::vector<WalkthroughMode>& done) {
  int n = dp.size();
  m.grad_bytes = static_cast<size_t>(P_) * 4;
  std::string senders;
  for (int r = 1; r < n; ++r) senders += (r > 1 ? ", " : "") + dev(r);
  if (n == 1) {
    line("reduce", "one replica: its gradients are already the whole batch's");
    return;
  }
  if (spec.strategy == Strategy::zero2 || spec.strategy == Strategy::zero3) {
    walk::zero_reduce(*this, zero_run(spec, dp), m, t.reduce, done);
    return;
  }
  if (spec.strategy == Strategy::zero1) {
    std::string got;
    for (const auto& sh : dp.shards())
      got += strf("%s%s receives [%lld, %lld) from each other replica (%lld bytes each)",
                  got.empty() ? "" : "; ", dev(sh.replica).c_str(), (long long)sh.begin,
                  (long long)sh.end, (long long)((sh.end - sh.begin) * 4));
    line("reduce", "reduce-scatter in " + ms(t.reduce) + ": " + got);
    more(
        strf("each replica still sends its %lld gradients = %zu bytes (P*4) in all, but no "
             "device receives more than its shard",
             (long long)P_, m.grad_bytes));
    return;
  }
  if (!spec.overlap) {
    line("reduce", strf("gradients reduce-added onto %s: %s sends %lld gradients = %zu bytes (P*4) "
                        "per non-primary replica, %s adds them, in %s",
                        dev(0).c_str(), senders.c_str(), (long long)P_, m.grad_bytes,
                        dev(0).c_str(), ms(t.reduce).c_str()));
    more(dev(0) + " now holds the gradient of the whole batch; the others' are no longer needed");
    return;
  }
  // --overlap: which bucket reductions began before backward was over
  int64_t backward_end = 0, first_reduce = -1, early = 0, reduces = 0;
  for (const TraceSpan& s : spans)
    if (s.name == "backward") backward_end = std::max(backward_end, s.end_us);
  for (const TraceSpan& s : spans) {
    if (s.name != "reduce" || s.lane.size() < 5 || s.lane.substr(s.lane.size() - 5) != " comm")
      continue;
    ++reduces;
    if (first_reduce < 0 || s.begin_us < first_reduce) first_reduce = s.begin_us;
    if (s.begin_us < backward_end) ++early;
  }
  m.early_reductions = early;
  line("reduce", strf("%lld buckets reduce-added onto %s on the comm streams (%zu bytes = P*4 from "
                      "each of %s); after backward the host waited only %s for the rest",
                      (long long)m.buckets, dev(0).c_str(), m.grad_bytes, senders.c_str(),
                      ms(t.reduce).c_str()));
  if (reduces == 0) {
    more("the trace holds no reduce spans on comm lanes (NCCL collectives are not traced)");
  } else if (early > 0) {
    more(
        strf("the trace shows the overlap: %lld of %lld bucket reductions began before the last "
             "backward span ended (first at +%s, backward ended at +%s)",
             (long long)early, (long long)reduces, us_ms(first_reduce - step_t0).c_str(),
             us_ms(backward_end - step_t0).c_str()));
  } else {
    more(
        strf("this time none of the %lld bucket reductions began before backward ended (the "
             "machine had no spare core for the comm stream)",
             (long long)reduces));
  }
}

void Narrator::narrate_memory(WalkthroughMode& m, const std::vector<AllocatorStats>& base) {
  line("memory",
       "peak bytes per device in this mode (allocator stats by tag, above what the device held "
       "before)");
  m.memory = presentation::device_peaks_above(distinct_, base);
  std::vector<std::pair<std::string, presentation::DevicePeak>> rows;
  for (const presentation::DevicePeak& d : m.memory) rows.push_back({d.device, d});
  memory_table("device", 9, rows);
  if (m.name == "dp-output")
    more(
        "params, grads: the flat buffers; optimizer: AdamW m and v; activations: each replica's "
        "arena for its rows, logits included; comm: collective staging buffers and gathered "
        "outputs; data: token ids and targets");
}

void Narrator::compare(const ModeSpec& spec, const WalkthroughMode& m,
                       const std::vector<WalkthroughMode>& done) {
  if (done.empty()) return;
  const WalkthroughMode& dp = done[0];
  std::string ours, theirs;
  double worst = 0;
  for (size_t i = 0; i < m.losses.size(); ++i) {
    ours += strf("%s%.5f", i ? ", " : "", m.losses[i]);
    if (i < dp.losses.size()) {
      theirs += strf("%s%.5f", i ? ", " : "", dp.losses[i]);
      worst = std::max(worst, std::abs(m.losses[i] - dp.losses[i]));
    }
  }
  line("check", "losses " + ours + " vs dp-output's " + theirs +
                    strf(" (largest difference %.1e): the same training step", worst));
  const presentation::DevicePeak& p0 = dp.memory[0];
  const presentation::DevicePeak& p1 = m.memory[0];
  if (spec.name == "dp") {
    size_t saved = p0.tag(MemTag::comm) > p1.tag(MemTag::comm)
                       ? p0.tag(MemTag::comm) - p1.tag(MemTag::comm)
                       : 0;
    line("changed",
         strf("no %s gather: %zu bytes per step neither allocated nor copied onto %s",
              shape({o_.batch_size, o_.seq_len, V_}).c_str(), dp.gather_bytes, dev(0).c_str()));
    more(strf("%s comm peak %s -> %s (%zu bytes less); total peak %s -> %s", dev(0).c_str(),
              bytes_str(p0.tag(MemTag::comm)).c_str(), bytes_str(p1.tag(MemTag::comm)).c_str(),
              saved, bytes_str(p0.peak_bytes).c_str(), bytes_str(p1.peak_bytes).c_str()));
    int64_t seed_vocab = models::llama_preset("seed").vocab_size;
    line("why", strf("the gathered logits grow as B*T*V and all land on one device: the seed "
                     "preset (vocab %lld) at a batch of 16 x 512 would gather %s onto %s alone, "
                     "the hot primary that "
                     "runs out of memory first under nn.DataParallel; with the loss on the "
                     "replicas each device holds only its own rows' logits",
                     (long long)seed_vocab, bytes_str(size_t{16} * 512 * seed_vocab * 4).c_str(),
                     dev(0).c_str()));
  } else if (spec.name == "dp-overlap") {
    const presentation::DevicePeak& prev = done.back().memory[0];
    line("changed", strf("reduce after backward: %s with --overlap vs %s in the previous mode "
                         "(host wait, step 1): the buckets were summed while backward ran",
                         ms(overlap_wait_).c_str(), ms(plain_wait_).c_str()));
    more(
        strf("%s comm peak %s -> %s: the reduction's staging buffer holds one bucket, not the "
             "whole gradient",
             dev(0).c_str(), bytes_str(prev.tag(MemTag::comm)).c_str(),
             bytes_str(p1.tag(MemTag::comm)).c_str()));
  } else if (parallel::strategy_shards_grads(spec.strategy)) {
    walk::zero_compare(*this, zero_run_, m, done);
  } else if (spec.strategy == Strategy::zero1) {
    std::string per;
    for (size_t r = 0; r < m.optimizer_bytes.size(); ++r)
      per += strf("%s%s %zu bytes", r ? ", " : "", dev(static_cast<int>(r)).c_str(),
                  m.optimizer_bytes[r]);
    line("changed", "optimizer state per device: " + per +
                        strf(" = about 1/%zu of dp-output's %zu bytes on %s",
                             m.optimizer_bytes.size(), dp.optimizer_bytes[0], dev(0).c_str()));
    more(strf("no hot primary: %s's total peak %s with dp-output -> %s with zero1", dev(0).c_str(),
              bytes_str(p0.peak_bytes).c_str(), bytes_str(p1.peak_bytes).c_str()));
  }
}

}  // namespace fanout::walkthrough::walk
