#include "apps/presentation/walkthrough.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "apps/data/corpus.h"
#include "apps/data/data_loader.h"
#include "apps/presentation/bench.h"
#include "apps/presentation/text_table.h"
#include "apps/presentation/trace_timeline.h"
#include "apps/presentation/walkthrough_ddp.h"
#include "apps/presentation/walkthrough_precision.h"
#include "apps/presentation/walkthrough_prose.h"
#include "apps/presentation/walkthrough_zero.h"
#include "apps/train/loss_functions.h"
#include "apps/train/memory_check.h"
#include "apps/train/optimizer.h"
#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/grad_buckets.h"
#include "models/llama_model.h"

namespace fanout::presentation {

namespace {

using Clock = std::chrono::steady_clock;
using parallel::DataParallel;
using parallel::LossOn;
using parallel::PhaseTimes;
using parallel::Strategy;
using namespace walk;

std::string us_ms(int64_t us) {
  return strf("%.2f ms", static_cast<double>(us) / 1e3);
}
std::string num(int64_t v) {
  return std::to_string(v);
}
std::string shape(std::initializer_list<int64_t> dims) {
  std::string s = "(";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + num(d);
  return s + ")";
}

struct ModeSpec {
  std::string name, title;
  Strategy strategy;
  LossOn loss_on;
  bool overlap;
};
const ModeSpec kModes[] = {
    {"dp-output", "dp-output (--strategy dp --loss-on output): what nn.DataParallel does",
     Strategy::dp, LossOn::output, false},
    {"dp", "dp (--strategy dp, the loss on the replicas): only loss scalars are gathered",
     Strategy::dp, LossOn::replicas, false},
    {"dp-overlap",
     "dp-overlap (--strategy dp --overlap): gradient buckets reduced while backward runs",
     Strategy::dp, LossOn::replicas, true},
    {"zero1", "zero1: sharded optimizer state", Strategy::zero1, LossOn::replicas, false},
    {"zero2", "zero2: gradients sharded too, reduced unit by unit during backward", Strategy::zero2,
     LossOn::replicas, false},
    {"zero3", "zero3: weights sharded too, gathered unit by unit", Strategy::zero3,
     LossOn::replicas, false},
};

// Restores the recorder to disabled even when a mode throws.
struct TraceOn {
  TraceOn() {
    Trace::global().clear();
    Trace::global().set_enabled(true);
  }
  ~TraceOn() { Trace::global().set_enabled(false); }
};

// Spans that began in [t0, t1].
std::vector<TraceSpan> spans_between(int64_t t0, int64_t t1) {
  std::vector<TraceSpan> out;
  for (TraceSpan& s : Trace::global().spans())
    if (s.begin_us >= t0 && s.begin_us <= t1) out.push_back(std::move(s));
  return out;
}
// Total microseconds of the spans called `name` on `lane`.
int64_t span_us(const std::vector<TraceSpan>& spans, const std::string& lane,
                const std::string& name) {
  int64_t t = 0;
  for (const TraceSpan& s : spans)
    if (s.lane == lane && s.name == name) t += s.end_us - s.begin_us;
  return t;
}

// The walkthrough's shared state and the narration of one mode.
class Narrator : public Prose {
 public:
  Narrator(const WalkthroughOptions& o, std::ostream& out)
      : Prose(out, o.color, o.width),
        o_(o),
        layout_(o.config),
        P_(layout_.total()),
        V_(o.config.vocab_size) {
    for (const Device& d : o.devices) {
      bool seen = false;
      for (const Device& e : distinct_) seen = seen || e == d;
      if (!seen) distinct_.push_back(d);
    }
    data::Corpus corpus = data::default_corpus();
    data_ = data::corpus_token_data(corpus.train_documents, "<embedded default corpus: train>");
  }

  int64_t parameters() const { return P_; }
  const data::TokenData& data() const { return data_; }
  void intro();
  WalkthroughMode run(const ModeSpec& spec, const std::vector<WalkthroughMode>& done);
  void summary(const std::vector<WalkthroughMode>& modes);

 private:
  std::string dev(int r) const { return o_.devices[r].str(); }
  std::string lane(int r, const std::string& what) const {
    return parallel::replica_lane(o_.devices, r, what);
  }
  std::string param_at(int64_t element) const {
    for (const models::ParamInfo& p : layout_.params())
      if (element >= p.offset && element < p.offset + p.numel)
        return p.name.rfind("model.", 0) == 0 ? p.name.substr(6) : p.name;
    return "?";
  }
  std::vector<AllocatorStats> device_stats() const {
    std::vector<AllocatorStats> s;
    for (const Device& d : distinct_) s.push_back(allocator_for(d).stats());
    return s;
  }
  // The timeline's bar columns: o_.timeline_width, fewer where the lanes' labels
  // and the bars would pass the width.
  int timeline_fit(const std::vector<TraceSpan>& spans) const {
    if (width_ == 0) return o_.timeline_width;
    size_t label = 4;
    for (const std::string& l : timeline_lanes(spans)) label = std::max(label, l.size());
    const int room = static_cast<int>(width_) - static_cast<int>(label) - 5;
    return std::max(10, std::min(o_.timeline_width, room));
  }
  int distinct_index(Device d) const {
    for (size_t i = 0; i < distinct_.size(); ++i)
      if (distinct_[i] == d) return static_cast<int>(i);
    return 0;
  }

  void narrate_forward_backward(const ModeSpec& spec, WalkthroughMode& m, const data::Batch& b,
                                const parallel::LossStats& st, const PhaseTimes& t,
                                const std::vector<TraceSpan>& spans);
  void narrate_reduce(const ModeSpec& spec, WalkthroughMode& m, DataParallel& dp,
                      const PhaseTimes& t, int64_t step_t0, const std::vector<TraceSpan>& spans,
                      const std::vector<WalkthroughMode>& done);
  walk::ZeroRun zero_run(const ModeSpec& spec, DataParallel& dp) const {
    return {spec.strategy, o_.devices, dp.shards(), dp.primary().units(), 4};  // fp32 weights
  }
  void narrate_memory(WalkthroughMode& m, const std::vector<AllocatorStats>& base);
  // After the narration: timing_warmup untraced steps, then timed_steps timed ones.
  std::string warmup_str() const {
    return o_.timing_warmup > 0 ? strf(" and %d more", o_.timing_warmup) : "";
  }
  void time_warm_steps(DataParallel& dp, train::Optimizer& opt, data::DataLoader& loader,
                       WalkthroughMode& m);
  void compare(const ModeSpec& spec, const WalkthroughMode& m,
               const std::vector<WalkthroughMode>& done);

  const WalkthroughOptions& o_;
  models::LlamaLayout layout_;
  int64_t P_, V_;
  std::vector<Device> distinct_;
  data::TokenData data_;
  double plain_wait_ = 0, overlap_wait_ = 0;  // step 1's reduce, without and with --overlap
  walk::ZeroRun zero_run_;                    // the mode that runs now
};

void Narrator::intro() {
  const models::LlamaConfig& c = o_.config;
  title("fanout walkthrough: data parallelism, one phase at a time");
  line("model", strf("Llama, %lld layers, hidden %lld, vocab %lld: %lld parameters = %s of f32 "
                     "in one flat buffer",
                     (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)V_,
                     (long long)P_, bytes_str(P_ * 4).c_str()));
  line("batch", strf("%lld rows x %lld tokens from the embedded corpus (packed windows of B*T+1 "
                     "tokens, every target counted)",
                     (long long)o_.batch_size, (long long)o_.seq_len));
  line("devices", devices_str(o_.devices) + ": " + dev(0) +
                      " is the primary (master weights, gathered outputs, output device)");
  more(
      strf("each mode runs %d step%s from the same initial weights on the same batches, so its "
           "losses must match dp-output's",
           o_.steps, o_.steps == 1 ? "" : "s"));
}

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
  m.memory = memory_peaks(distinct_, base);
  std::vector<std::pair<std::string, DeviceMemory>> rows;
  for (const DeviceMemory& d : m.memory) rows.push_back({d.device, d});
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
  const DeviceMemory& p0 = dp.memory[0];
  const DeviceMemory& p1 = m.memory[0];
  if (spec.name == "dp") {
    size_t saved = p0.tag(MemTag::comm) > p1.tag(MemTag::comm)
                       ? p0.tag(MemTag::comm) - p1.tag(MemTag::comm)
                       : 0;
    line("changed",
         strf("no %s gather: %zu bytes per step neither allocated nor copied onto %s",
              shape({o_.batch_size, o_.seq_len, V_}).c_str(), dp.gather_bytes, dev(0).c_str()));
    more(strf("%s comm peak %s -> %s (%zu bytes less); total peak %s -> %s", dev(0).c_str(),
              bytes_str(p0.tag(MemTag::comm)).c_str(), bytes_str(p1.tag(MemTag::comm)).c_str(),
              saved, bytes_str(p0.total).c_str(), bytes_str(p1.total).c_str()));
    int64_t seed_vocab = models::llama_preset("seed").vocab_size;
    line("why", strf("the gathered logits grow as B*T*V and all land on one device: the seed "
                     "preset (vocab %lld) at a batch of 16 x 512 would gather %s onto %s alone, "
                     "the hot primary that "
                     "runs out of memory first under nn.DataParallel; with the loss on the "
                     "replicas each device holds only its own rows' logits",
                     (long long)seed_vocab, bytes_str(size_t{16} * 512 * seed_vocab * 4).c_str(),
                     dev(0).c_str()));
  } else if (spec.name == "dp-overlap") {
    const DeviceMemory& prev = done.back().memory[0];
    line("changed", strf("reduce after backward: %s with --overlap vs %s in the previous mode "
                         "(host wait, step 1): the buckets were summed while backward ran",
                         ms(overlap_wait_).c_str(), ms(plain_wait_).c_str()));
    more(
        strf("%s comm peak %s -> %s: the reduction's staging buffer holds one bucket, not the "
             "whole gradient",
             dev(0).c_str(), bytes_str(prev.tag(MemTag::comm)).c_str(),
             bytes_str(p1.tag(MemTag::comm)).c_str()));
  } else if (spec.name == "zero2" || spec.name == "zero3") {
    walk::zero_compare(*this, zero_run_, m, done);
  } else if (spec.name == "zero1") {
    std::string per;
    for (size_t r = 0; r < m.optimizer_bytes.size(); ++r)
      per += strf("%s%s %zu bytes", r ? ", " : "", dev(static_cast<int>(r)).c_str(),
                  m.optimizer_bytes[r]);
    line("changed", "optimizer state per device: " + per +
                        strf(" = about 1/%zu of dp-output's %zu bytes on %s",
                             m.optimizer_bytes.size(), dp.optimizer_bytes[0], dev(0).c_str()));
    more(strf("no hot primary: %s's total peak %s with dp-output -> %s with zero1", dev(0).c_str(),
              bytes_str(p0.total).c_str(), bytes_str(p1.total).c_str()));
  }
}

WalkthroughMode Narrator::run(const ModeSpec& spec, const std::vector<WalkthroughMode>& done) {
  int index = static_cast<int>(done.size()) + 1;
  int n = static_cast<int>(o_.devices.size());
  out_ << "\n";
  title(strf("%d. %s", index, spec.title.c_str()));
  WalkthroughMode m;
  m.name = spec.name;

  std::vector<AllocatorStats> base = device_stats();
  for (const Device& d : distinct_) allocator_for(d).reset_peak();
  parallel::DataParallelOptions options;
  options.device_ids = o_.devices;
  options.strategy = spec.strategy;
  options.loss_on = spec.loss_on;
  options.overlap = spec.overlap;
  options.bucket_mb = o_.bucket_mb;
  auto factory = [&](Device d, int i) {
    return std::make_unique<models::LlamaModel>(o_.config, d, lane(i, "compute"));
  };
  DataParallel dp(factory, options, train::cross_entropy_loss_functions());
  // The same initial weights in every mode: onto the primary (replicate copies
  // them), or under zero3 straight into each device's shard.
  dp.params_from_host(models::LlamaModel::random_params(o_.config, 1).data());
  if (spec.strategy != Strategy::dp) {
    // zero2/zero3 own a piece of every unit: the elements per replica, summed.
    m.shard_elements.assign(dp.size(), 0);
    for (const auto& sh : dp.shards()) m.shard_elements[sh.replica] += sh.end - sh.begin;
  }
  zero_run_ = zero_run(spec, dp);
  ops::AdamWConfig adam;
  train::Optimizer opt(dp, train::decay_runs(layout_), adam);

  // What this mode does differently, before it runs.
  if (spec.name == "dp-output") {
    more("logits are gathered onto " + dev(0) +
         ", the loss is computed there, gradients are "
         "reduce-added onto " +
         dev(0) + " after backward, and the optimizer steps there");
  } else if (spec.name == "dp") {
    more("each replica computes the loss of its own rows; only {loss sum, token count} comes back");
  } else if (spec.name == "dp-overlap") {
    parallel::GradBuckets buckets(P_, o_.bucket_mb, n);
    m.buckets = buckets.count();
    more(
        strf("the %s gradient buffer is cut into %lld buckets of up to %s (instead of the default "
             "25 MiB, so that this small model has several), counted from the top: backward "
             "finishes the last layers first. Once every replica has queued a bucket's "
             "gradients, its reduction starts on the comm streams while backward computes the "
             "layers below (the loss stays on the replicas).",
             bytes_str(P_ * 4).c_str(), (long long)m.buckets,
             bytes_str(static_cast<size_t>(o_.bucket_mb * 1024 * 1024)).c_str()));
    for (int64_t k = 0; k < m.buckets; ++k) {
      if (k == 10 && m.buckets > 11) {
        more(strf("  ... %lld more", (long long)(m.buckets - 10)));
        break;
      }
      auto [lo, hi] = buckets.bucket(k);
      more(strf("  #%lld [%lld, %lld) %s: %s .. %s", (long long)k, (long long)lo, (long long)hi,
                bytes_str((hi - lo) * 4).c_str(), param_at(hi - 1).c_str(), param_at(lo).c_str()));
    }
  } else if (spec.name == "zero1") {
    more(
        "each device owns one shard of the flat buffers: it receives only its shard's summed "
        "gradients (reduce-scatter), keeps AdamW state for that shard only, updates it, and "
        "sends the new values to the others (all-gather)");
    for (const auto& sh : dp.shards())
      more(strf("  %s owns [%lld, %lld) %s: %s .. %s", dev(sh.replica).c_str(), (long long)sh.begin,
                (long long)sh.end, bytes_str((sh.end - sh.begin) * 4).c_str(),
                param_at(sh.begin).c_str(), param_at(sh.end - 1).c_str()));
  } else if (spec.strategy == Strategy::zero2 || spec.strategy == Strategy::zero3) {
    m.units = static_cast<int64_t>(zero_run_.units.size());
    walk::zero_intro(*this, zero_run_);
  }

  data::DataLoader loader(data_, o_.batch_size, o_.seq_len, true, false, 0, models::kIgnoreIndex);
  Trace& trace = Trace::global();
  int64_t mode_t0 = trace.now_us();
  for (int step = 1; step <= o_.steps; ++step) {
    data::Batch b = loader.next();
    parallel::HostBatch hb{b.B, b.T, b.inputs.data(), b.targets.data()};
    bool detail = step == 1;
    if (detail) {
      out_ << "  " << bold(strf("step %d", step)) << "\n";
      m.rows = dp.split(b.B);
      for (int64_t r : m.rows) m.scatter_bytes.push_back(static_cast<size_t>(r * b.T * 4));
      m.gather_bytes = spec.loss_on == LossOn::output ? static_cast<size_t>(b.B * b.T * V_ * 4) : 0;
    }
    dp.reset_times();
    auto wall0 = Clock::now();
    int64_t t0 = trace.now_us();
    dp.zero_grad();
    parallel::LossStats st =
        dp.forward_backward(hb, models::kIgnoreIndex, static_cast<double>(b.counted()));
    PhaseTimes fb = dp.last_times();
    if (detail) narrate_forward_backward(spec, m, b, st, fb, spans_between(t0, trace.now_us()));

    dp.reduce_gradients();
    PhaseTimes red = dp.last_times();
    const parallel::CommBytes before_update = dp.comm_bytes();
    if (detail) {
      m.weights_sent = before_update.replicate, m.sums_sent = before_update.reduce;
      if (spec.strategy == Strategy::zero3) {
        walk::GatherBytes g = walk::zero3_gather_bytes(zero_run_, m.rows);
        m.gather_forward = g.forward, m.gather_backward = g.backward;
      }
      narrate_reduce(spec, m, dp, red, t0, spans_between(t0, trace.now_us()), done);
      (spec.overlap ? overlap_wait_ : plain_wait_) = red.reduce;
    }

    double norm;
    {
      TraceScope span("host", "optimizer");
      norm = opt.step(step, adam.lr, 1.0);
    }
    FANOUT_CHECK(std::isfinite(norm), "the gradient norm is ", norm, " at step ", step);
    PhaseTimes all = dp.last_times();
    if (detail) m.update_sent = dp.comm_bytes().replicate - before_update.replicate;
    double step_s = std::chrono::duration<double>(Clock::now() - wall0).count();
    m.losses.push_back(st.loss_sum / static_cast<double>(st.count));
    m.step_ms.push_back(step_s * 1e3);
    if (detail) {
      for (int r = 0; r < n; ++r) {
        MemStats opt_mem = allocator_for(o_.devices[r]).stats().tag(MemTag::optimizer);
        MemStats before = base[distinct_index(o_.devices[r])].tag(MemTag::optimizer);
        m.optimizer_bytes.push_back(opt_mem.live - std::min(opt_mem.live, before.live));
      }
      double gather_s = all.replicate - red.replicate;  // zero1's all-gather in finish_step
      if (spec.strategy != Strategy::dp) {
        std::string per;
        for (int r = 0; r < n; ++r)
          per += strf("%s%s %zu bytes", r ? ", " : "", dev(r).c_str(), m.optimizer_bytes[r]);
        line("optimizer", strf("AdamW on every device at once, each on its shard, in %s; "
                               "gradient norm %.3f (clipped to 1.0), lr %g",
                               ms(all.optimizer).c_str(), norm, adam.lr));
        more("optimizer state (fp32 m and v of the shard): " + per);
        std::string recv;
        for (int r = 0; r < n; ++r)
          recv += strf("%s%s %lld", r ? ", " : "", dev(r).c_str(),
                       (long long)((P_ - m.shard_elements[r]) * 4));
        if (spec.strategy == Strategy::zero3) {
          line("all-gather", strf("none: %lld bytes sent by the update. Each owner's updated "
                                  "shard is what the next forward gathers from",
                                  (long long)m.update_sent));
        } else {
          line("all-gather", "each device sends its updated shard to the others in " +
                                 ms(gather_s) + "; bytes received: " + recv +
                                 strf(" (%lld in all)", (long long)m.update_sent));
          more("every replica is current again, so the next step broadcasts nothing");
        }
      } else {
        line("optimizer",
             strf("AdamW on %s only, in %s: %zu bytes of state there (m and v: 2 x %lld x 4, "
                  "plus the norm); gradient norm %.3f (clipped to 1.0), lr %g",
                  dev(0).c_str(), ms(all.optimizer).c_str(), m.optimizer_bytes[0], (long long)P_,
                  norm, adam.lr));
        if (n > 1)
          more("only " + dev(0) + "'s parameters changed: the next step broadcasts them again");
      }
      line("step", strf("loss %.5f, %.2f ms in all", m.losses.back(), step_s * 1e3));
    } else {
      std::string phases;
      auto add = [&](const char* what, double s) {
        if (s > 0) phases += strf("%s%s %.2f", phases.empty() ? "" : ", ", what, s * 1e3);
      };
      // zero1/zero2: the update's all-gather; zero3: only finishing the step.
      const char* weights = spec.strategy == Strategy::dp      ? "replicate"
                            : spec.strategy == Strategy::zero3 ? "finish"
                                                               : "all-gather";
      add("scatter", all.scatter), add(weights, all.replicate), add("forward", all.forward);
      add("gather", all.gather), add("loss", all.loss), add("backward", all.backward);
      add("reduce", all.reduce), add("optimizer", all.optimizer);
      line(strf("step %d", step),
           strf("loss %.5f, %.2f ms (%s ms)", m.losses.back(), step_s * 1e3, phases.c_str()));
    }
  }
  int64_t mode_t1 = trace.now_us();
  narrate_memory(m, base);
  compare(spec, m, done);
  out_ << "  " << bold("timeline")
       << strf("   %s, %d step%s (one row per trace lane)\n", spec.name.c_str(), o_.steps,
               o_.steps == 1 ? "" : "s");
  out_ << timeline_render(trace.spans(), mode_t0, mode_t1,
                          timeline_fit(spans_between(mode_t0, mode_t1)), o_.color);
  legend(timeline_legend(o_.color));
  time_warm_steps(dp, opt, loader, m);
  return m;
}

void Narrator::time_warm_steps(DataParallel& dp, train::Optimizer& opt, data::DataLoader& loader,
                               WalkthroughMode& m) {
  // Untraced: recording costs time, and the timelines show the narrated steps.
  Trace::global().set_enabled(false);
  ops::AdamWConfig adam;
  for (int k = 0; k < o_.timing_warmup + o_.timed_steps; ++k) {
    data::Batch b = loader.next();
    parallel::HostBatch hb{b.B, b.T, b.inputs.data(), b.targets.data()};
    auto t0 = Clock::now();
    dp.zero_grad();
    dp.forward_backward(hb, models::kIgnoreIndex, static_cast<double>(b.counted()));
    dp.reduce_gradients();
    opt.step(o_.steps + k + 1, adam.lr, 1.0);
    double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (k >= o_.timing_warmup) m.timed_ms.push_back(step_ms);
  }
  Trace::global().set_enabled(true);
  line("timing", strf("%d more step%s, untraced, warmed up by the narrated ones%s: median ",
                      o_.timed_steps, o_.timed_steps == 1 ? "" : "s", warmup_str().c_str()) +
                     step_times_str(step_times_summarize(m.timed_ms)));
}

void Narrator::summary(const std::vector<WalkthroughMode>& modes) {
  out_ << "\n"
       << text_wrap(heading("summary") +
                        " (step time: median of each mode's warm, untraced timed steps, with the "
                        "IQR q1-q3 and min-max; peak bytes on the primary " +
                        dev(0) + ")",
                    width_, "  ");
  // --wide: the widths it always had.
  const bool wide = width_ == 0;
  auto figure = [&](size_t w) { return wide ? w : 0; };
  TextTable t;
  t.indent = "  ";
  t.columns = {{"mode", figure(11), true}, {"median", figure(10)},    {"IQR", figure(17)},
               {"min-max", figure(17)},    {"peak", figure(10)},      {"params", figure(10)},
               {"grads", figure(10)},      {"optimizer", figure(10)}, {"comm", figure(10)}};
  for (const WalkthroughMode& m : modes) {
    const StepTimes st = step_times_summarize(m.timed_ms);
    const DeviceMemory& d = m.memory[0];
    t.rows.push_back({{m.name, strf("%.2f ms", st.median), strf("%.2f-%.2f ms", st.q1, st.q3),
                       strf("%.2f-%.2f ms", st.min, st.max), bytes_str(d.total),
                       bytes_str(d.tag(MemTag::params)), bytes_str(d.tag(MemTag::grads)),
                       bytes_str(d.tag(MemTag::optimizer)), bytes_str(d.tag(MemTag::comm))},
                      ""});
  }
  table(t);
  const int timed = modes.empty() ? 0 : step_times_summarize(modes[0].timed_ms).samples;
  line("", strf("%d timed step%s per mode after its %d narrated (warm-up) step%s%s; ddp is not "
                "timed here (computed, not run): fanout bench --modes ddp measures it",
                timed, timed == 1 ? "" : "s", o_.steps, o_.steps == 1 ? "" : "s",
                warmup_str().c_str()));
}

}  // namespace

models::LlamaConfig walkthrough_config() {
  models::LlamaConfig c = models::llama_preset("tiny");
  c.num_hidden_layers = 2;
  return c;
}

WalkthroughResult walkthrough_run(const WalkthroughOptions& o, std::ostream& out) {
  FANOUT_CHECK(!o.devices.empty(), "the walkthrough needs at least one device");
  for (const Device& d : o.devices)
    FANOUT_CHECK(!d.is_bare(), "--devices needs indices, e.g. cpu:0,cpu:1 (got ", d.str(), ")");
  FANOUT_CHECK(o.batch_size > 0, "--batch-size must be positive, got ", o.batch_size);
  FANOUT_CHECK(o.seq_len > 0, "--seq-len must be positive, got ", o.seq_len);
  FANOUT_CHECK(o.seq_len <= o.config.max_position_embeddings, "--seq-len ", o.seq_len,
               " exceeds max_position_embeddings ", o.config.max_position_embeddings);
  FANOUT_CHECK(o.steps > 0, "--steps must be positive, got ", o.steps);
  FANOUT_CHECK(o.timed_steps > 0, "--timed-steps must be positive, got ", o.timed_steps);
  FANOUT_CHECK(o.timing_warmup >= 0, "the timing warm-up must be 0 or more, got ", o.timing_warmup);
  o.config.validate();
  // dp gathers the logits: a batch that cannot fit is refused before the model is built.
  train::memory_check_fits(
      o.config, o.devices,
      {o.batch_size,
       train::memory_largest_share(o.batch_size, static_cast<int64_t>(o.devices.size())), o.seq_len,
       true, true});

  Narrator narrator(o, out);
  WalkthroughResult result;
  result.parameters = narrator.parameters();
  narrator.intro();
  {
    TraceOn recording;
    for (const ModeSpec& spec : kModes) result.modes.push_back(narrator.run(spec, result.modes));
  }
  // Computed, not run: one process per device would leave this one.
  const int ddp_index = static_cast<int>(result.modes.size()) + 1;
  result.ddp = walk::ddp_step_compute(narrator.parameters(), static_cast<int>(o.devices.size()),
                                      o.batch_size, o.bucket_mb);
  walk::ddp_narrate(o, result.ddp, result.modes, ddp_index, out);
  // Not traced: the trace shows the modes.
  result.precision = walk::walkthrough_precision(o, narrator.data(), ddp_index + 1, out);
  narrator.summary(result.modes);
  if (!o.trace_path.empty()) {
    std::vector<TraceSpan> spans = Trace::global().spans();
    Trace::global().write(o.trace_path);
    out << "\n"
        << text_wrap(strf("trace: %zu spans on %zu lanes, all %zu modes, written to %s (open it "
                          "in ui.perfetto.dev)",
                          spans.size(), timeline_lanes(spans).size(), result.modes.size(),
                          o.trace_path.c_str()),
                     o.width, "  ");
  }
  return result;
}

}  // namespace fanout::presentation
