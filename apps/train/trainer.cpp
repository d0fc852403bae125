#include "apps/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <functional>
#include <optional>

#include "apps/data/corpus.h"
#include "apps/data/data_loader.h"
#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "apps/train/batch_finder.h"
#include "apps/train/checkpoint.h"
#include "apps/train/checkpoint_rotation.h"
#include "apps/train/ddp_env.h"
#include "apps/train/eval_history.h"
#include "apps/train/progress.h"
#include "apps/train/run_dir.h"
#include "apps/train/sample_text.h"
#include "apps/train/schedule.h"
#include "apps/train/stop_signals.h"
#include "apps/train/train_batch.h"
#include "apps/train/train_setup.h"
#include "apps/train/training.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "engine/core/number_text.h"
#include "engine/core/trace.h"
#include "engine/parallel/grid.h"
#include "ops/attention.h"

namespace fanout::train {

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The peak bytes of every device the run uses (each once; replicas and stages
// may share one).
std::string memory_str(const std::vector<Device>& devices) {
  std::string out;
  std::vector<Device> seen;
  for (const Device& d : devices) {
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
    seen.push_back(d);
    if (!out.empty()) out += ' ';
    out += d.str() + " " + bytes_str(allocator_for(d).stats().total.peak);
  }
  return out;
}

nlohmann::json memory_json(const std::vector<Device>& devices) {
  nlohmann::json j = nlohmann::json::object();
  for (const Device& d : devices) j[d.str()] = allocator_for(d).stats().total.peak;
  return j;
}

// Test hook (tests/apps/fanout): rank FANOUT_TEST_KILL_RANK kills itself at the
// start of step FANOUT_TEST_KILL_STEP. Read by the number rules before anything is made.
struct KillHook {
  int64_t rank = -1, step = -1;
};
KillHook kill_hook_from_environment() {
  KillHook k;
  if (const char* r = std::getenv("FANOUT_TEST_KILL_RANK")) {
    const char* step = std::getenv("FANOUT_TEST_KILL_STEP");
    FANOUT_CHECK(step != nullptr, "environment variable FANOUT_TEST_KILL_RANK is set without ",
                 "FANOUT_TEST_KILL_STEP");
    k.rank = parse_whole_number(r, 0, INT32_MAX, "environment variable FANOUT_TEST_KILL_RANK");
    k.step = parse_whole_number(step, 0, INT64_MAX, "environment variable FANOUT_TEST_KILL_STEP");
  }
  return k;
}

// Each rank found its checkpoint (or none) in --out itself: all must start at
// rank 0's step, or the ranks would train different things (an --out not shared).
void ranks_agree_on_start(distributed::ProcessGroup& group, const Setup& s) {
  const int64_t first = s.resume ? s.resume->state.step : 0;
  double at[2] = {s.ddp.is_main() ? static_cast<double>(first) : 0.0, 0.0};
  group.all_reduce_host(at, 1);
  at[1] = at[0] == static_cast<double>(first) ? 0.0 : 1.0;
  group.all_reduce_host(at + 1, 1);
  const auto step0 = static_cast<int64_t>(at[0]);
  FANOUT_CHECK(at[1] == 0, "the ranks would start from different steps (rank 0 from step ", step0,
               step0 == first ? "" : detail::str_cat(", this rank from step ", first), "; ",
               static_cast<int64_t>(at[1]), " rank(s) differ from rank 0): every rank must see ",
               "the same --out ", s.o.out, " (a shared filesystem)");
}

TrainingOptions training_options(const Setup& s, distributed::ProcessGroup* group) {
  const TrainOptions& o = s.o;
  TrainingOptions t;
  t.config = s.config;
  t.devices = s.devices;
  t.output_device = s.output_device;
  t.chunk_sizes = s.chunk_sizes;
  t.strategy = s.strategy.strategy;
  t.loss_on = s.loss_on;
  t.overlap = o.overlap;
  t.bucket_mb = o.bucket_mb;
  t.group = group;
  t.grad_comm = precision_dtype(o.grad_comm, "--grad-comm");
  t.working = precision_dtype(o.precision);
  t.adam.lr = static_cast<float>(o.lr), t.adam.beta1 = static_cast<float>(o.beta1);
  t.adam.beta2 = static_cast<float>(o.beta2), t.adam.eps = static_cast<float>(o.eps);
  t.adam.weight_decay = static_cast<float>(o.weight_decay);
  t.recompute = o.recompute;
  t.offload_optimizer = o.offload == "optimizer";
  t.graphs = graphs_parse(o, o.strategy, o.loss_on);
  t.stages = static_cast<int>(o.pp);
  t.tensor = static_cast<int>(o.tp);
  t.sequence_parallel = o.sequence_parallel;
  t.pipe_schedule = s.pipe_schedule;
  t.micro_batches = s.micro_batches;
  t.cut = s.cut;
  return t;
}

// What would make a run that ran out of memory fit, of what it does not use yet.
std::string memory_hint(const TrainOptions& o, const Setup& s) {
  std::vector<std::string> flags;
  if (!o.recompute) flags.push_back("--recompute");
  const parallel::Strategy st = s.strategy.strategy;
  const bool grid = o.pp > 1 || o.tp > 1;
  if (!grid && st == parallel::Strategy::dp) flags.push_back("--strategy zero1, zero2 or zero3");
  if (!grid && st == parallel::Strategy::zero1) flags.push_back("--strategy zero2 or zero3");
  if (!grid && st == parallel::Strategy::zero2) flags.push_back("--strategy zero3");
  // A grid shares its stages over its replicas (if it has several) as dp, zero1
  // or (pipelines without tensor parallelism or zb1) zero2 does.
  const bool replicas = static_cast<int64_t>(s.devices.size()) > o.pp * o.tp;
  const bool grid_zero2 = o.tp == 1 && s.pipe_schedule != parallel::PipeSchedule::zb1;
  if (grid && replicas && st == parallel::Strategy::dp)
    flags.push_back(grid_zero2 ? "--strategy zero1 or zero2" : "--strategy zero1");
  if (grid && replicas && grid_zero2 && st == parallel::Strategy::zero1)
    flags.push_back("--strategy zero2");
  if (!grid && o.offload.empty() && !(s.strategy.processes && st == parallel::Strategy::dp))
    flags.push_back("--offload optimizer");
  flags.push_back(o.batch_size_auto ? "a larger --batch-size-margin" : "--batch-size auto");
  std::string out = "; to fit, try ";
  for (size_t i = 0; i < flags.size(); ++i)
    out += (i == 0 ? "" : i + 1 == flags.size() ? " or " : ", ") + flags[i];
  return out;
}

// Runs fn; an out-of-memory error gains the flags that would help, and `prefix`.
template <typename F>
void with_memory_hint(const Setup& s, const std::string& prefix, const F& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("out of memory") == std::string::npos && prefix.empty()) throw;
    detail::throw_error(
        prefix + what +
        (what.find("out of memory") != std::string::npos ? memory_hint(s.o, s) : ""));
  }
}

// A --batch-size auto trial (batch_finder.h): the run's parts at the size set up in
// `s`, two steps and the held-out forward on the run's first batches, then gone.
// Under ddp each process runs its own share alone.
void batch_trial(const Setup& s) {
  const TrainOptions& o = s.o;
  InitialWeights initial;
  initial.seed = o.seed;
  Training t(training_options(s, nullptr), initial);
  data::DataLoader loader = setup_train_loader(s);
  for (int64_t step = 1; step <= 2; ++step) {
    const data::Batch b = loader.next();  // the rows below point into it
    const parallel::HostBatch rows = s.ddp.batch_rows(b);
    t.forward_backward(rows, std::max<int64_t>(b.counted(), 1));
    t.reduce_gradients();
    t.optimizer_step(step, static_cast<float>(o.lr), o.clip);
    if (step == 2 && s.has_val) t.evaluate(rows);
  }
}

// The lines a run starts with: what trains where, on what, and from where.
std::vector<std::string> header_lines(const Setup& s, distributed::ProcessGroup* group,
                                      int64_t start) {
  const TrainOptions& o = s.o;
  std::string where = s.ddp.enabled ? std::to_string(s.ddp.world) + " processes (" + group->name() +
                                          ", rank 0 on " + s.devices[0].str() + ")"
                                    : devices_str(s.devices);
  // A grid says which device holds which replica, stage and tensor shard.
  if (o.pp > 1 || o.tp > 1)
    where = parallel::describe_grid(s.devices, static_cast<int>(o.pp), static_cast<int>(o.tp));
  char header[4096];
  std::snprintf(
      header, sizeof header,
      "fanout train: %.2fM parameters on %s | %s, loss on %s%s | %s%s%s%s%s%s%s | batch %lld x "
      "%lld%s "
      "| "
      "steps %lld..%lld | data %s (%lld tokens) | out %s",
      s.config.num_parameters() / 1e6, where.c_str(), o.strategy.c_str(), o.loss_on.c_str(),
      o.overlap ? ", overlap" : "", o.precision == "bf16" ? "bf16 mixed precision" : "fp32",
      o.grad_comm == "bf16" ? ", bf16 gradient sums" : "", o.recompute ? ", recompute" : "",
      o.projections == "fused" ? ", fused projections" : "", o.graphs == "on" ? ", graphs" : "",
      o.gemm_algo == "timed" ? ", timed GEMMs" : "",
      o.sequence_parallel ? ", sequence parallel" : "", static_cast<long long>(o.batch_size),
      static_cast<long long>(o.seq_len),
      o.grad_accum > 1 ? (" in " + std::to_string(o.grad_accum) + " micro-batches").c_str() : "",
      static_cast<long long>(start), static_cast<long long>(o.steps), s.train_data.path.c_str(),
      static_cast<long long>(s.train_data.token_count() + s.held_out), o.out.c_str());
  std::vector<std::string> lines{header};
  if (s.devices[0].is_cuda()) {
    lines.push_back(std::string("attention: ") +
                    ops::attention_describe(s.devices[0], precision_dtype(o.precision)));
  }
  if (s.tokenizer_beside) {
    lines.push_back("tokenizer: " + s.tokenizer->describe() + " (" + s.tokenizer_from +
                    ", the one the data was prepared with)");
  } else if (!s.tokenizer->is_byte()) {
    lines.push_back("tokenizer: " + s.tokenizer->describe());
  }
  if (o.resume == "auto") {  // Note [Resume auto] in train_setup.cpp
    lines.push_back(s.resume ? "resuming from " + s.resume_dir + " (step " +
                                   std::to_string(s.resume->state.step) + ")"
                             : "no checkpoint in " + o.out + ": starting fresh");
  } else if (s.resume) {
    lines.push_back("resumed from " + s.resume_dir);
  }
  for (const std::string& note : s.notes) lines.push_back(note);
  return lines;
}

// One rank's training run once everything is assembled: the loop, checkpoints,
// held-out evaluations and the end of the run.
class Run {
 public:
  // release: frees the engine, after which the run only samples (0: keep it).
  Run(const Setup& s, Training& t, distributed::ProcessGroup* group, int64_t kill_step,
      nlohmann::json batch_search, std::function<void()> release)
      : s_(s),
        o_(s.o),
        t_(t),
        group_(group),
        main_(s.ddp.is_main()),
        kill_step_(kill_step),
        loader_(setup_train_loader(s)),
        history_(s),
        schedule_{s.o.schedule, s.o.lr, s.o.min_lr, s.o.warmup, s.o.steps},
        batch_search_(std::move(batch_search)),
        release_(std::move(release)) {
    // A resumed run keeps what its search found while it trains with that batch.
    const nlohmann::json& found = s.resume ? s.resume->state.batch_search : batch_search_;
    auto same = [&](const char* key, int64_t v) {
      const auto it = found.find(key);
      return it != found.end() && it->is_number_integer() && it->get<int64_t>() == v;
    };
    if (batch_search_.is_null() && found.is_object() && same("batch_size", s.o.batch_size) &&
        same("grad_accum", s.o.grad_accum))
      batch_search_ = found;
    if (s.resume) {
      t_.optimizer().state_from_host(s.resume->exp_avg, s.resume->exp_avg_sq);
      loader_.set_state(s.resume_data);
      start_ = s.resume->state.step + 1;
      tokens_seen_ = s.resume->state.tokens_seen;
      last_checkpoint_ = s.resume_dir;
    }
    if (main_) metrics_.emplace((fs::path(o_.out) / "metrics.jsonl").string(), start_ - 1);
    progress_.emplace(o_.steps, start_, o_.json || !main_);
  }

  int64_t start() const { return start_; }
  void say(const std::string& line) {
    if (main_) progress_->message(line);
  }
  const EvalHistory& history() const { return history_; }

  // The steps; returns the exit code (128 + the signal when one stopped the run).
  int loop();
  // After the loop: final/, the trace, the end-of-run evaluation, the sample.
  int finish(int exit_code);

 private:
  std::string save(const std::string& name, int64_t step);
  bool on_eval(int64_t step);
  // One step; returns whether the run stops after it (early stop).
  bool step(int64_t step);
  [[noreturn]] void stop(int64_t step, const char* what, double value);
  void say_held_out_summary(nlohmann::json& summary);
  void say_sample();

  const Setup& s_;
  const TrainOptions& o_;
  Training& t_;
  distributed::ProcessGroup* group_;
  const bool main_;  // only rank 0 prints, logs and checkpoints
  const int64_t kill_step_;
  data::DataLoader loader_;
  EvalHistory history_;
  Schedule schedule_;
  std::optional<MetricsLog> metrics_;
  std::optional<Progress> progress_;
  std::optional<StopSignals> signals_;
  int64_t start_ = 1, tokens_seen_ = 0, final_step_ = 0;
  std::string last_checkpoint_;
  nlohmann::json batch_search_;
  std::function<void()> release_;
  double last_loss_ = 0;
  int stop_signal_ = 0;
};

std::string Run::save(const std::string& name, int64_t step) {
  std::string dir = (fs::path(o_.out) / name).string();
  // Sharded across processes, a checkpoint's gathers need every rank.
  const bool collective_save = t_.sharded_across_processes();
  if (!main_ && !collective_save) return dir;
  Checkpoint c;
  c.config = s_.config;
  c.params = t_.params_to_host();  // whole, whatever the strategy
  t_.optimizer().state_to_host(c.exp_avg, c.exp_avg_sq);
  if (!main_) return dir;
  c.state.step = step;
  c.state.data = loader_.state();
  c.state.seed = o_.seed;
  c.state.tokens_seen = tokens_seen_;
  c.state.flags = train_options_to_json(o_);
  c.state.best_val_loss = history_.best_loss;
  c.state.best_step = history_.best_step;
  c.state.evals_since_best = history_.evals_since_best;
  c.state.batch_search = batch_search_;
  if (history_.last_step == step) c.state.val_loss = history_.last.loss;
  c.tokenizer_json = s_.tokenizer->to_json();
  checkpoint_write(dir, c);
  return dir;
}

// An evaluation after `step` (every rank: it is collective): logged, said, and
// best/ replaced when the loss improved under --save-best. Returns whether
// --early-stop's patience has run out.
bool Run::on_eval(int64_t step) {
  const EvalResult result = evaluate_held_out(t_, s_, group_);
  if (metrics_) metrics_->write({{"step", step}, {"val_loss", result.loss}});
  const bool better = history_.record(result, step);
  std::string line = "step " + std::to_string(step) + ": " + result.str();
  if (better && o_.save_best) {
    save(kBestCheckpoint, step);
    line += " -> " + std::string(kBestCheckpoint) + "/";
  } else if (!better && (o_.save_best || o_.early_stop > 0)) {
    line += history_.best_str();
  }
  say(line);
  return history_.patience_out(o_.early_stop);
}

void Run::stop(int64_t step, const char* what, double value) {
  signals_->restore();
  detail::throw_error(detail::str_cat(
      "step ", step, ": the ", what, " is ", value, "; stopped before updating the weights",
      last_checkpoint_.empty() ? std::string(" (no checkpoint was written yet)")
                               : " (last good checkpoint: " + last_checkpoint_ + ")"));
}

bool Run::step(int64_t step) {
  auto t0 = Clock::now();
  double lr = schedule_.at(step);
  std::vector<data::Batch> micro;
  int64_t counted = 0;
  if (step == kill_step_) std::raise(SIGKILL);
  for (int64_t k = 0; k < o_.grad_accum; ++k) {
    micro.push_back(loader_.next());
    counted += micro.back().counted();  // the global batch: every rank knows the total
  }
  std::vector<parallel::HostBatch> rows;
  for (const data::Batch& b : micro) rows.push_back(s_.ddp.batch_rows(b));
  // An error inside the step (out of memory under --device-memory, a failed
  // device or rank) says which step it stopped.
  auto at_step = [&](const auto& fn) {
    try {
      with_memory_hint(s_, "step " + std::to_string(step) + ": ", fn);
    } catch (const Error&) {
      signals_->restore();
      throw;
    }
  };
  double loss_sum = 0;
  at_step([&] { loss_sum = t_.forward_backward(rows, std::max<int64_t>(counted, 1)).loss_sum; });
  // Ranks agree on the loss and on stopping (a Ctrl-C seen by any rank).
  double shared[3] = {loss_sum, signals_->requested() == SIGINT ? 1.0 : 0.0,
                      signals_->requested() == SIGTERM ? 1.0 : 0.0};
  if (group_) group_->all_reduce_host(shared, 3);
  loss_sum = shared[0];
  stop_signal_ = shared[2] > 0 ? SIGTERM : shared[1] > 0 ? SIGINT : 0;
  double loss = counted > 0 ? loss_sum / counted : 0.0;
  if (!std::isfinite(loss)) stop(step, "loss", loss);
  double norm = 0;
  at_step([&] {
    t_.reduce_gradients();
    norm = t_.optimizer_step(step, static_cast<float>(lr), o_.clip);
  });
  if (!std::isfinite(norm)) stop(step, "gradient norm", norm);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  int64_t step_tokens = o_.batch_size * o_.seq_len;  // bounded by train_prepare
  tokens_seen_ = size_add("the tokens seen by the run", {tokens_seen_, step_tokens});
  last_loss_ = loss;
  const std::vector<Device>& devices = t_.options().devices;
  if (metrics_)
    metrics_->write({{"step", step},
                     {"loss", loss},
                     {"lr", lr},
                     {"grad_norm", norm},
                     {"tokens_per_s", step_tokens / secs},
                     {"step_s", secs},
                     {"tokens", tokens_seen_},
                     {"peak_bytes", memory_json(devices)}});
  progress_->step({step, loss, lr, norm, step_tokens / secs, memory_str(devices)});
  bool stop_early = false;
  if (s_.has_val && o_.eval_every > 0 && step % o_.eval_every == 0 && step != o_.steps) {
    stop_early = on_eval(step);
  }
  // The run's last step is saved as final/ just after the loop: a step-N of the
  // same weights would be a second copy (an interrupted run writes no final/).
  const bool last_step = step == o_.steps || stop_early;
  if ((o_.save_every > 0 && step % o_.save_every == 0 && !last_step) || stop_signal_ != 0) {
    last_checkpoint_ = save(checkpoint_step_name(step), step);
    // Only now that the new one is in place (checkpoint_rotation.h).
    if (main_) checkpoint_rotate(o_.out, o_.keep_last);
  }
  return stop_early;
}

int Run::loop() {
  if (!o_.trace.empty()) Trace::global().set_enabled(true);
  // Note [Stopping on a signal] (stop_signals.cpp); fanout launch, the parent, passes signals on.
  signals_.emplace(s_.ddp.launcher == "fanout launch" ? ::getppid() : 0);
  final_step_ = o_.steps;  // earlier under --early-stop
  for (int64_t n = start_; n <= o_.steps; ++n) {
    const bool stop_early = step(n);
    if (stop_signal_ != 0) {
      say(std::string(stop_signal_ == SIGTERM ? "terminated (SIGTERM)" : "interrupted") +
          " at step " + std::to_string(n) + ": checkpoint " + last_checkpoint_ +
          " (continue with --resume last --out " + o_.out + ")");
      return 128 + stop_signal_;
    }
    if (stop_early) {
      char line[192];
      std::snprintf(line, sizeof line,
                    "early stop at step %lld: no better held-out loss in %lld evaluations "
                    "(best %.4f at step %lld)",
                    static_cast<long long>(n), static_cast<long long>(o_.early_stop),
                    history_.best_loss, static_cast<long long>(history_.best_step));
      say(line);
      final_step_ = n;
      break;
    }
  }
  return 0;
}

void Run::say_held_out_summary(nlohmann::json& summary) {
  // An early stop has just evaluated these weights.
  if (history_.last_step != final_step_) on_eval(final_step_);
  const double val = history_.last.loss;
  summary["val_loss"] = val;
  if (history_.best_step >= 0)
    summary["best_val_loss"] = history_.best_loss, summary["best_step"] = history_.best_step;
  char line[256] = "";
  if (s_.embedded) {
    std::snprintf(line, sizeof line,
                  "held-out loss %.3f nats/token vs %.3f for the corpus's unigram entropy "
                  "(a model that ignores context)",
                  val, s_.unigram);
    summary["unigram_entropy"] = s_.unigram;
  } else if (main_) {
    // The training data's own unigram entropy (its first 2^27 tokens at most).
    const double unigram = data::token_data_unigram_entropy(s_.train_data, int64_t{1} << 27);
    std::snprintf(line, sizeof line, "held-out loss %.3f nats/token vs %.3f for the unigram ", val,
                  unigram);
    summary["unigram_entropy"] = unigram;
  }
  say(s_.embedded ? std::string(line)
                  : line + ("entropy of " + o_.data + " (a model that ignores context)"));
}

int Run::finish(int exit_code) {
  signals_->restore();
  progress_->finish();
  // The checkpoint first: nothing after the last step may lose the run.
  std::string final_dir = exit_code == 0 ? save("final", final_step_) : "";
  if (!o_.trace.empty() && main_) {
    Trace::global().set_enabled(false);
    Trace::global().write(o_.trace);
    say("trace written to " + o_.trace + " (open in ui.perfetto.dev)");
  }
  if (exit_code != 0) return exit_code;
  nlohmann::json summary = {
      {"steps", final_step_}, {"loss", last_loss_}, {"out", o_.out}, {"checkpoint", final_dir}};
  if (final_step_ < o_.steps) summary["early_stop"] = true;
  if (s_.has_val) say_held_out_summary(summary);
  // zero3 and pipelines keep no whole model on any device: the sample runs on a copy.
  std::vector<float> whole;
  if (!o_.json && (s_.strategy.strategy == parallel::Strategy::zero3 || t_.pipelined()))
    whole = t_.params_to_host();
  if (!main_) return 0;
  say("final checkpoint: " + final_dir);
  if (!o_.json) {
    try {
      std::string sample;
      if (whole.empty()) {
        sample = sample_text(t_.primary(), *s_.tokenizer, o_.seed, 240);
      } else {
        // The engine's memory goes first: the copy is a whole model on one device.
        const DType working = t_.options().working;
        const int64_t total = t_.layout().total();
        if (release_) release_();
        models::LlamaModel copy(s_.config, s_.devices[0], "", working);
        tensor_upload(copy.compute_stream(), copy.params(), whole.data());
        copy.params_to_working(0, total);
        sample = sample_text(copy, *s_.tokenizer, o_.seed, 240);
      }
      say("sample:\n  " + sample);
    } catch (const Error& e) {
      say(std::string("no sample: ") + e.what());
    }
  }
  if (o_.json) std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace

int train_run(TrainOptions options, const std::set<std::string>& given, std::string* run_dir) {
  KillHook kill = kill_hook_from_environment();
  Setup s = train_prepare(std::move(options), given);
  const TrainOptions& o = s.o;
  train_options_check_validation(o, s.has_val);
  const bool main_rank = s.ddp.is_main();  // only rank 0 prints, logs and checkpoints
  DdpGroup ddp;
  if (s.ddp.enabled) ddp = ddp_connect(s.ddp, s.devices[0], o.timeout, !o.json);
  distributed::ProcessGroup* group = ddp.group.get();
  if (group) ranks_agree_on_start(*group, s);
  // Before anything is written: the largest batch that fits (batch_finder.h).
  std::optional<BatchChoice> choice;
  if (o.batch_size_auto) {
    auto agree = [group](bool fits) {
      if (!group) return fits;
      double failed = fits ? 0.0 : 1.0;
      group->all_reduce_host(&failed, 1);
      return failed == 0;
    };
    auto say = [&](const std::string& line) {
      if (main_rank && !o.json) std::printf("%s\n", line.c_str()), std::fflush(stdout);
    };
    choice = batch_size_find(s, given, batch_trial, agree, say);
  }
  // From here on files are written, by rank 0 alone, in a directory it owns.
  std::optional<RunDirLock> lock;
  std::vector<std::string> cleaned;
  if (main_rank) {
    lock.emplace(o.out);
    cleaned = run_dir_remove_stale_temps(o.out);
    if (run_dir) *run_dir = o.out;
  }
  InitialWeights initial;
  initial.values = s.resume                 ? s.resume->params.data()
                   : !s.init_params.empty() ? s.init_params.data()
                                            : nullptr;
  initial.seed = o.seed;
  std::optional<Training> training;
  with_memory_hint(s, "", [&] { training.emplace(training_options(s, group), initial); });
  Run run(s, *training, group, kill.rank == s.ddp.rank ? kill.step : -1,
          choice ? choice->to_json() : nlohmann::json(), [&training] { training.reset(); });
  for (const std::string& line : header_lines(s, group, run.start())) run.say(line);
  if (choice) run.say(choice->line());
  if (!run.history().note.empty()) run.say(run.history().note);
  for (const std::string& name : cleaned)
    run.say("removed " + name + " (left by an interrupted write)");
  if (s.has_val) {
    const int64_t batches = held_out_loader(s).batches_per_epoch();
    if (o.val_batches > 0 && o.val_batches < batches) {
      run.say("held-out loss over the first " + std::to_string(o.val_batches) + " of " +
              std::to_string(batches) + " batches (--val-batches)");
    }
  }
  return run.finish(run.loop());
}

}  // namespace fanout::train
