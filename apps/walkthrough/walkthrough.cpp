#include "apps/walkthrough/walkthrough.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "apps/data/corpus.h"
#include "apps/data/data_loader.h"
#include "apps/presentation/text_table.h"
#include "apps/presentation/trace_timeline.h"
#include "apps/train/memory_check.h"
#include "apps/train/training.h"
#include "apps/walkthrough/walkthrough_ddp.h"
#include "apps/walkthrough/walkthrough_ddp_run.h"
#include "apps/walkthrough/walkthrough_narrator.h"
#include "apps/walkthrough/walkthrough_pipeline.h"
#include "apps/walkthrough/walkthrough_precision.h"
#include "apps/walkthrough/walkthrough_prose.h"
#include "apps/walkthrough/walkthrough_tensor.h"
#include "apps/walkthrough/walkthrough_zero.h"
#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/grad_buckets.h"
#include "models/llama_model.h"

namespace fanout::walkthrough {

namespace walk {

std::string us_ms(int64_t us) {
  return strf("%.2f ms", static_cast<double>(us) / 1e3);
}
std::string shape(std::initializer_list<int64_t> dims) {
  std::string s = "(";
  for (int64_t d : dims) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(d);
  }
  return s + ")";
}

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

using parallel::LossOn;
using parallel::Strategy;

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

WalkthroughMode Narrator::run(const ModeSpec& spec, const std::vector<WalkthroughMode>& done) {
  int index = static_cast<int>(done.size()) + 1;
  out_ << "\n";
  title(strf("%d. %s", index, spec.title.c_str()));
  WalkthroughMode m;
  m.name = spec.name;

  std::vector<AllocatorStats> base = device_stats();
  for (const Device& d : distinct_) allocator_for(d).reset_peak();
  train::TrainingOptions options;
  options.config = o_.config;
  options.devices = o_.devices;
  train::training_options_set_mode(options, spec);
  options.bucket_mb = o_.bucket_mb;
  // The same initial weights in every mode: onto the primary (replicate copies
  // them), or under zero3 straight into each device's shard.
  train::Training training(options, train::InitialWeights{});
  DataParallel& dp = training.engine();
  if (spec.strategy != Strategy::dp) {
    // zero2/zero3 own a piece of every unit: the elements per replica, summed.
    m.shard_elements.assign(dp.size(), 0);
    for (const auto& sh : dp.shards()) m.shard_elements[sh.replica] += sh.end - sh.begin;
  }
  zero_run_ = zero_run(spec, dp);
  say_plan(spec, dp, m);

  data::DataLoader loader(data_, o_.batch_size, o_.seq_len, true, false, 0, models::kIgnoreIndex);
  Trace& trace = Trace::global();
  int64_t mode_t0 = trace.now_us();
  for (int step = 1; step <= o_.steps; ++step)
    run_step(spec, training, loader.next(), step, base, done, m);
  int64_t mode_t1 = trace.now_us();
  narrate_memory(m, base);
  compare(spec, m, done);
  out_ << "  " << bold("timeline")
       << strf("   %s, %d step%s (one row per trace lane)\n", spec.name.c_str(), o_.steps,
               o_.steps == 1 ? "" : "s");
  out_ << presentation::timeline_render(trace.spans(), mode_t0, mode_t1,
                                        timeline_fit(spans_between(mode_t0, mode_t1)), o_.color);
  legend(presentation::timeline_legend(o_.color));
  time_warm_steps(training, loader, m);
  return m;
}

// What this mode does differently, before it runs.
void Narrator::say_plan(const ModeSpec& spec, DataParallel& dp, WalkthroughMode& m) {
  const int n = static_cast<int>(o_.devices.size());
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
  } else if (spec.strategy == Strategy::zero1) {
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
}

// One narrated step; the first says what each phase did, the others one line.
void Narrator::run_step(const ModeSpec& spec, train::Training& training, const data::Batch& b,
                        int step, const std::vector<AllocatorStats>& base,
                        const std::vector<WalkthroughMode>& done, WalkthroughMode& m) {
  DataParallel& dp = training.engine();
  Trace& trace = Trace::global();
  parallel::HostBatch hb{b.B, b.T, b.inputs.data(), b.targets.data()};
  const bool detail = step == 1;
  if (detail) {
    out_ << "  " << bold(strf("step %d", step)) << "\n";
    m.rows = dp.split(b.B);
    for (int64_t r : m.rows) m.scatter_bytes.push_back(static_cast<size_t>(r * b.T * 4));
    m.gather_bytes = spec.loss_on == LossOn::output ? static_cast<size_t>(b.B * b.T * V_ * 4) : 0;
  }
  dp.reset_times();
  auto wall0 = Clock::now();
  int64_t t0 = trace.now_us();
  parallel::LossStats st = training.forward_backward(hb, static_cast<double>(b.counted()));
  PhaseTimes fb = dp.last_times();
  if (detail) narrate_forward_backward(spec, m, b, st, fb, spans_between(t0, trace.now_us()));

  training.reduce_gradients();
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

  const float lr = training.options().adam.lr;
  double norm;
  {
    TraceScope span("host", "optimizer");
    norm = training.optimizer_step(step, lr, 1.0);
  }
  FANOUT_CHECK(std::isfinite(norm), "the gradient norm is ", norm, " at step ", step);
  PhaseTimes all = dp.last_times();
  if (detail) m.update_sent = dp.comm_bytes().replicate - before_update.replicate;
  double step_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  // What the page draws: this step, until a later one replaces it.
  m.last_weights_sent = before_update.replicate, m.last_sums_sent = before_update.reduce;
  m.last_update_sent = dp.comm_bytes().replicate - before_update.replicate;
  m.last.t0_us = t0, m.last.t1_us = trace.now_us();
  m.last.spans = spans_between(m.last.t0_us, m.last.t1_us);
  m.losses.push_back(st.loss_sum / static_cast<double>(st.count));
  m.step_ms.push_back(step_s * 1e3);
  if (detail) {
    const int n = static_cast<int>(o_.devices.size());
    for (int r = 0; r < n; ++r) {
      MemStats opt_mem = allocator_for(o_.devices[r]).stats().tag(MemTag::optimizer);
      MemStats before = base[distinct_index(o_.devices[r])].tag(MemTag::optimizer);
      m.optimizer_bytes.push_back(opt_mem.live - std::min(opt_mem.live, before.live));
    }
    narrate_update(spec, m, all, red, norm, lr);
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

// The first step's update: AdamW where it ran, its state, and what the weights sent.
void Narrator::narrate_update(const ModeSpec& spec, const WalkthroughMode& m, const PhaseTimes& all,
                              const PhaseTimes& red, double norm, float lr) {
  const int n = static_cast<int>(o_.devices.size());
  double gather_s = all.replicate - red.replicate;  // zero1's all-gather, closing the step
  if (spec.strategy != Strategy::dp) {
    std::string per;
    for (int r = 0; r < n; ++r)
      per += strf("%s%s %zu bytes", r ? ", " : "", dev(r).c_str(), m.optimizer_bytes[r]);
    line("optimizer", strf("AdamW on every device at once, each on its shard, in %s; "
                           "gradient norm %.3f (clipped to 1.0), lr %g",
                           ms(all.optimizer).c_str(), norm, lr));
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
      line("all-gather", "each device sends its updated shard to the others in " + ms(gather_s) +
                             "; bytes received: " + recv +
                             strf(" (%lld in all)", (long long)m.update_sent));
      more("every replica is current again, so the next step broadcasts nothing");
    }
  } else {
    line("optimizer",
         strf("AdamW on %s only, in %s: %zu bytes of state there (m and v: 2 x %lld x 4, "
              "plus the norm); gradient norm %.3f (clipped to 1.0), lr %g",
              dev(0).c_str(), ms(all.optimizer).c_str(), m.optimizer_bytes[0], (long long)P_, norm,
              lr));
    if (n > 1)
      more("only " + dev(0) + "'s parameters changed: the next step broadcasts them again");
  }
}

std::vector<double> time_steps(const WalkthroughOptions& o, train::Training& training,
                               data::DataLoader& loader, int64_t first_step) {
  // Untraced: recording costs time, and the timelines show the narrated steps.
  Trace::global().set_enabled(false);
  const float lr = training.options().adam.lr;
  std::vector<double> ms;
  for (int k = 0; k < o.timing_warmup + o.timed_steps; ++k) {
    data::Batch b = loader.next();
    parallel::HostBatch hb{b.B, b.T, b.inputs.data(), b.targets.data()};
    auto t0 = Clock::now();
    training.step(hb, static_cast<double>(b.counted()), first_step + k, lr, 1.0);
    double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (k >= o.timing_warmup) ms.push_back(step_ms);
  }
  return ms;
}

void Narrator::time_warm_steps(train::Training& training, data::DataLoader& loader,
                               WalkthroughMode& m) {
  m.timed_ms = time_steps(o_, training, loader, o_.steps + 1);
  Trace::global().set_enabled(true);
  line("timing", strf("%d more step%s, untraced, warmed up by the narrated ones%s: median ",
                      o_.timed_steps, o_.timed_steps == 1 ? "" : "s", warmup_str().c_str()) +
                     presentation::step_times_str(presentation::step_times_summarize(m.timed_ms)));
}

void Narrator::summary(const std::vector<WalkthroughMode>& modes, const WalkthroughDdp& ddp) {
  out_ << "\n"
       << presentation::text_wrap(
              heading("summary") +
                  " (step time: median of each mode's warm, untraced timed steps, with the "
                  "IQR q1-q3 and min-max; peak bytes on the primary " +
                  dev(0) + ")",
              width_, "  ");
  // --wide: the widths it always had.
  const bool wide = width_ == 0;
  auto figure = [&](size_t w) { return wide ? w : 0; };
  presentation::TextTable t;
  t.indent = "  ";
  t.columns = {{"mode", figure(11), true}, {"median", figure(10)},    {"IQR", figure(17)},
               {"min-max", figure(17)},    {"peak", figure(10)},      {"params", figure(10)},
               {"grads", figure(10)},      {"optimizer", figure(10)}, {"comm", figure(10)}};
  auto add = [&](const std::string& name, const std::vector<double>& timed_ms,
                 const presentation::DevicePeak& d) {
    const presentation::StepTimes st = presentation::step_times_summarize(timed_ms);
    t.rows.push_back({{name, strf("%.2f ms", st.median), strf("%.2f-%.2f ms", st.q1, st.q3),
                       strf("%.2f-%.2f ms", st.min, st.max), bytes_str(d.peak_bytes),
                       bytes_str(d.tag(MemTag::params)), bytes_str(d.tag(MemTag::grads)),
                       bytes_str(d.tag(MemTag::optimizer)), bytes_str(d.tag(MemTag::comm))},
                      ""});
  };
  for (const WalkthroughMode& m : modes) add(m.name, m.timed_ms, m.memory[0]);
  const bool ddp_timed = ddp.ran && !ddp.timed_ms.empty() && !ddp.memory.empty();
  if (ddp_timed) add("ddp", ddp.timed_ms, ddp.memory[0]);
  table(t);
  const int timed =
      modes.empty() ? 0 : presentation::step_times_summarize(modes[0].timed_ms).samples;
  line("", strf("%d timed step%s per mode after its %d narrated (warm-up) step%s%s%s", timed,
                timed == 1 ? "" : "s", o_.steps, o_.steps == 1 ? "" : "s", warmup_str().c_str(),
                ddp_timed ? "; ddp's ranks are threads of this process here"
                          : "; ddp is not timed here (computed, not run): fanout bench --modes "
                            "ddp measures it"));
}

}  // namespace walk

namespace {

// The modes the walkthrough narrates, in its order (the table: engine/parallel/strategy.h).
constexpr std::string_view kModes[] = {"dp-output", "dp", "dp-overlap", "zero1", "zero2", "zero3"};

// Restores the recorder to disabled even when a mode throws.
struct TraceOn {
  TraceOn() {
    Trace::global().clear();
    Trace::global().set_enabled(true);
  }
  ~TraceOn() { Trace::global().set_enabled(false); }
};

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

  walk::Narrator narrator(o, out);
  WalkthroughResult result;
  result.parameters = narrator.parameters();
  narrator.intro();
  {
    TraceOn recording;
    for (std::string_view name : kModes)
      result.modes.push_back(narrator.run(*parallel::mode_find(name), result.modes));
  }
  // Computed, then run with the ranks as threads of this process where it can.
  const int ddp_index = static_cast<int>(result.modes.size()) + 1;
  result.ddp = walk::ddp_step_compute(narrator.parameters(), static_cast<int>(o.devices.size()),
                                      o.batch_size, o.bucket_mb);
  try {
    walk::ddp_step_run(o, narrator.data(), result.ddp);
  } catch (const Error& e) {
    // No loopback, a port that cannot be bound: the section stays computed.
    result.ddp.ran = false;
    result.ddp.refused = std::string("its ranks could not start here (") + e.what() + ")";
  }
  walk::ddp_narrate(o, result.ddp, result.modes, ddp_index, out);
  // Not traced: the trace shows the modes.
  result.precision = walk::walkthrough_precision(o, narrator.data(), ddp_index + 1, out);
  result.pipeline = walk::walkthrough_pipeline(o, narrator.data(), result.modes[0].losses.at(0),
                                               ddp_index + 2, out, result.schedules);
  result.tensor = walk::walkthrough_tensor(o, narrator.data(), result.modes[0].losses.at(0),
                                           ddp_index + 3, out);
  narrator.summary(result.modes, result.ddp);
  if (!o.trace_path.empty()) {
    std::vector<TraceSpan> spans = Trace::global().spans();
    Trace::global().write(o.trace_path);
    out << "\n"
        << presentation::text_wrap(
               presentation::strf(
                   "trace: %zu spans on %zu lanes, all %zu modes, written to %s (open it "
                   "in ui.perfetto.dev)",
                   spans.size(), presentation::timeline_lanes(spans).size(), result.modes.size(),
                   o.trace_path.c_str()),
               o.width, "  ");
  }
  return result;
}

}  // namespace fanout::walkthrough
