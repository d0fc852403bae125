#include "apps/train/trainer.h"

#include "apps/train/train_setup.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include "apps/data/corpus.h"
#include "apps/data/data_loader.h"
#include "apps/data/terminal_text.h"
#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "apps/train/checkpoint.h"
#include "apps/train/checkpoint_rotation.h"
#include "apps/train/ddp_env.h"
#include "apps/train/loss_functions.h"
#include "apps/train/optimizer.h"
#include "apps/train/progress.h"
#include "apps/train/run_dir.h"
#include "apps/train/schedule.h"
#include "apps/train/stop_signals.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/number_text.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_checkpoint.h"
#include "models/llama_generate.h"
#include "models/llama_model.h"
#include "ops/attention.h"

namespace fanout::train {

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string memory_str(parallel::DataParallel& dp) {
  std::string out;
  std::vector<Device> seen;
  for (int r = 0; r < dp.size(); ++r) {
    Device d = dp.replica(r).device();
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
    seen.push_back(d);
    if (!out.empty()) out += ' ';
    out += d.str() + " " + bytes_str(dp.memory(r).total.peak);
  }
  return out;
}

nlohmann::json memory_json(parallel::DataParallel& dp) {
  nlohmann::json j = nlohmann::json::object();
  for (int r = 0; r < dp.size(); ++r) j[dp.replica(r).device().str()] = dp.memory(r).total.peak;
  return j;
}

// This rank's rows of a global batch (all of them unless ddp).
parallel::HostBatch rank_rows(const data::Batch& b, const DdpEnv& ddp) {
  auto [first, count] = ddp.rows_of(b.B);
  return {count, b.T, b.inputs.data() + first * b.T, b.targets.data() + first * b.T};
}
parallel::HostBatch rank_rows(data::Batch&&,
                              const DdpEnv&) = delete;  // would point into a temporary

// One held-out evaluation: the mean loss over `batches` batches, `tokens` of them counted.
struct EvalResult {
  double loss = 0;
  int64_t batches = 0, tokens = 0;
  std::string str() const {
    char line[128];
    std::snprintf(line, sizeof line, "held-out loss %.4f over %lld batches (%lld tokens)", loss,
                  static_cast<long long>(batches), static_cast<long long>(tokens));
    return line;
  }
};

EvalResult evaluate(parallel::DataParallel& dp, const Setup& s, parallel::ProcessGroup* group) {
  data::DataLoader loader(s.val_data, s.micro_rows, s.o.seq_len, s.o.packing == "on", false, 0,
                          models::kIgnoreIndex);
  int64_t n = loader.batches_per_epoch();
  if (s.o.val_batches > 0) n = std::min(n, s.o.val_batches);
  double sums[2] = {0, 0};  // loss sum, counted tokens
  for (int64_t i = 0; i < n; ++i) {
    data::Batch b = loader.next();  // must outlive hb, which points into it
    parallel::HostBatch hb = rank_rows(b, s.ddp);
    if (hb.B == 0) continue;
    parallel::LossStats st = dp.evaluate(hb, models::kIgnoreIndex);
    sums[0] += st.loss_sum, sums[1] += static_cast<double>(st.count);
  }
  if (group) group->all_reduce_host(sums, 2);
  return {sums[1] > 0 ? sums[0] / sums[1] : 0.0, n, static_cast<int64_t>(sums[1])};
}

// Decoded with the run's tokenizer, control characters escaped (terminal_text.h).
std::string sample_text(models::LlamaModel& model, const data::TextTokenizer& tokenizer,
                        uint64_t seed, int64_t length) {
  int64_t max_len = std::min<int64_t>(length + 1, model.config().max_position_embeddings);
  models::LlamaGenerator gen(model, max_len);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out;
  const int32_t bot = tokenizer.bot();
  std::vector<float> logits = gen.feed({bot >= 0 && bot < model.config().vocab_size ? bot : 0});
  for (int64_t i = 1; i < max_len; ++i) {
    // temperature 0.8 over the 20 likeliest tokens
    std::vector<int32_t> order(logits.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int32_t>(j);
    size_t k = std::min<size_t>(20, order.size());
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    std::vector<double> p(k);
    double total = 0;
    for (size_t j = 0; j < k; ++j)
      total += p[j] = std::exp((logits[order[j]] - logits[order[0]]) / 0.8);
    double u = static_cast<double>(rng() >> 11) / 9007199254740992.0 * total;
    int32_t next = order[k - 1];
    for (size_t j = 0; j < k; ++j)
      if ((u -= p[j]) <= 0) {
        next = order[j];
        break;
      }
    if (next == tokenizer.eot()) break;
    out.push_back(next);
    if (i + 1 < max_len) logits = gen.feed({next});
  }
  // Nothing to show is said, not printed as a blank line.
  if (out.empty()) return "(empty: the model ended the text at once, [EOT] first)";
  const std::string text = tokenizer.decode(out);
  if (text.empty()) {
    return "(empty: the model wrote only special tokens, " + std::to_string(out.size()) +
           " of them, which decode to no text)";
  }
  return data::terminal_text_escape(text);
}

}  // namespace

int train_run(TrainOptions options, const std::set<std::string>& given, std::string* run_dir) {
  // Test hook (tests/apps/fanout): rank FANOUT_TEST_KILL_RANK kills itself at the
  // start of step FANOUT_TEST_KILL_STEP. Read by the number rules before anything is made.
  int64_t kill_rank = -1, kill_step = -1;
  if (const char* r = std::getenv("FANOUT_TEST_KILL_RANK")) {
    const char* step = std::getenv("FANOUT_TEST_KILL_STEP");
    FANOUT_CHECK(step != nullptr, "environment variable FANOUT_TEST_KILL_RANK is set without ",
                 "FANOUT_TEST_KILL_STEP");
    kill_rank = parse_whole_number(r, 0, INT32_MAX, "environment variable FANOUT_TEST_KILL_RANK");
    kill_step =
        parse_whole_number(step, 0, INT64_MAX, "environment variable FANOUT_TEST_KILL_STEP");
  }
  Setup s = train_prepare(std::move(options), given);
  const TrainOptions& o = s.o;
  train_options_check_validation(o, s.has_val);
  const bool main_rank = s.ddp.is_main();  // only rank 0 prints, logs and checkpoints
  if (kill_rank != s.ddp.rank) kill_step = -1;
  DdpGroup ddp;
  if (s.ddp.enabled) ddp = ddp_connect(s.ddp, s.devices[0], o.timeout, !o.json);
  parallel::ProcessGroup* group = ddp.group.get();
  if (group) {
    // Each rank found its checkpoint (or none) in --out itself: all must start at
    // rank 0's step, or the ranks would train different things (an --out not shared).
    const int64_t first = s.resume ? s.resume->state.step : 0;
    double at[2] = {main_rank ? static_cast<double>(first) : 0.0, 0.0};
    group->all_reduce_host(at, 1);
    at[1] = at[0] == static_cast<double>(first) ? 0.0 : 1.0;
    group->all_reduce_host(at + 1, 1);
    const auto step0 = static_cast<int64_t>(at[0]);
    FANOUT_CHECK(at[1] == 0, "the ranks would start from different steps (rank 0 from step ", step0,
                 step0 == first ? "" : detail::str_cat(", this rank from step ", first), "; ",
                 static_cast<int64_t>(at[1]), " rank(s) differ from rank 0): every rank must see ",
                 "the same --out ", o.out, " (a shared filesystem)");
  }
  // From here on files are written, by rank 0 alone, in a directory it owns.
  std::optional<RunDirLock> lock;
  std::vector<std::string> cleaned;
  if (main_rank) {
    lock.emplace(o.out);
    cleaned = run_dir_remove_stale_temps(o.out);
    if (run_dir) *run_dir = o.out;
  }
  models::LlamaLayout layout(s.config);

  parallel::DataParallelOptions dpo;
  dpo.device_ids = s.devices;
  dpo.output_device = s.output_device;
  dpo.chunk_sizes = s.chunk_sizes;
  dpo.strategy = o.strategy == "zero1"   ? parallel::Strategy::zero1
                 : o.strategy == "zero2" ? parallel::Strategy::zero2
                 : o.strategy == "zero3" ? parallel::Strategy::zero3
                                         : parallel::Strategy::dp;
  dpo.loss_on = o.loss_on == "output" ? parallel::LossOn::output : parallel::LossOn::replicas;
  dpo.overlap = o.overlap;
  dpo.bucket_mb = o.bucket_mb;
  dpo.process_group = group;
  dpo.grad_comm = o.grad_comm == "bf16" ? DType::bf16 : DType::f32;
  const std::vector<Device>& ids = s.devices;
  const DType working = o.precision == "bf16" ? DType::bf16 : DType::f32;
  auto factory = [&](Device d, int i) {
    return std::make_unique<models::LlamaModel>(s.config, d,
                                                parallel::replica_lane(ids, i, "compute"), working);
  };
  parallel::DataParallel dp(factory, dpo, cross_entropy_loss_functions());
  auto& primary = dynamic_cast<models::LlamaModel&>(dp.primary());
  {
    std::vector<float> random;
    const float* values = s.resume                 ? s.resume->params.data()
                          : !s.init_params.empty() ? s.init_params.data()
                                                   : nullptr;
    if (!values) random = models::LlamaModel::random_params(s.config, o.seed);
    dp.params_from_host(values ? values : random.data());
  }
  if (group && dpo.strategy != parallel::Strategy::zero3) {
    // every rank starts from rank 0's weights (zero3's ranks each load their own
    // shard of the same values)
    group->broadcast(primary.params(), 0, primary.compute_stream());
    primary.compute_stream().synchronize();
    dp.params_changed();
  }
  // Sharded across processes, a checkpoint's gathers need every rank.
  const bool collective_save = group != nullptr && dp.sharded();
  ops::AdamWConfig adam;
  adam.lr = static_cast<float>(o.lr), adam.beta1 = static_cast<float>(o.beta1);
  adam.beta2 = static_cast<float>(o.beta2), adam.eps = static_cast<float>(o.eps);
  adam.weight_decay = static_cast<float>(o.weight_decay);
  Optimizer opt(dp, decay_runs(layout), adam);
  data::DataLoader loader(s.train_data, s.micro_rows, o.seq_len, o.packing == "on", o.shuffle,
                          o.seed, models::kIgnoreIndex);
  int64_t start = 1, tokens_seen = 0;
  if (s.resume) {
    opt.state_from_host(s.resume->exp_avg, s.resume->exp_avg_sq);
    loader.set_state(s.resume_data);
    start = s.resume->state.step + 1;
    tokens_seen = s.resume->state.tokens_seen;
  }
  // Note [Held-out history]: the best held-out loss, its step and the evaluations
  // since it improved travel in trainer_state.json, so a resumed run keeps best/ and
  // stops early exactly where the uninterrupted run would. Losses measured on other
  // held-out data (--val-data or --val-batches given anew) are not comparable: the
  // history then starts over. final/ is written before the end-of-run evaluation
  // (the checkpoint first), so its history stops at the last evaluation in the loop;
  // best/ still takes the end-of-run weights when they are the best.
  double best_val = 0;
  int64_t best_step = -1, evals_since_best = 0;
  std::string history_note;
  if (s.resume && s.resume->state.best_step >= 0) {
    TrainOptions saved;
    train_options_merge(saved, s.resume->state.flags, {});
    if (saved.val_data == o.val_data && saved.val_batches == o.val_batches &&
        saved.val_split == o.val_split) {
      best_val = s.resume->state.best_val_loss;
      best_step = s.resume->state.best_step;
      evals_since_best = s.resume->state.evals_since_best;
    } else {
      history_note =
          "the held-out data or --val-batches changed: the best held-out loss and "
          "--early-stop's count start over";
    }
  }
  EvalResult last_eval;
  int64_t last_eval_step = -1;
  Schedule schedule{o.schedule, o.lr, o.min_lr, o.warmup, o.steps};
  std::optional<MetricsLog> metrics;
  if (main_rank) metrics.emplace((fs::path(o.out) / "metrics.jsonl").string(), start - 1);
  Progress progress(o.steps, start, o.json || !main_rank);
  auto say = [&](const std::string& line) {
    if (main_rank) progress.message(line);
  };

  auto save = [&](const std::string& name, int64_t step) -> std::string {
    std::string dir = (fs::path(o.out) / name).string();
    if (!main_rank && !collective_save) return dir;
    Checkpoint c;
    c.config = s.config;
    c.params.resize(layout.total());
    dp.params_to_host(c.params.data());  // whole, whatever the strategy
    opt.state_to_host(c.exp_avg, c.exp_avg_sq);
    if (!main_rank) return dir;
    c.state.step = step;
    c.state.data = loader.state();
    c.state.seed = o.seed;
    c.state.tokens_seen = tokens_seen;
    c.state.flags = train_options_to_json(o);
    c.state.best_val_loss = best_val;
    c.state.best_step = best_step;
    c.state.evals_since_best = evals_since_best;
    if (last_eval_step == step) c.state.val_loss = last_eval.loss;
    c.tokenizer_json = s.tokenizer->to_json();
    checkpoint_write(dir, c);
    return dir;
  };

  // An evaluation after `step` (every rank: it is collective): logged, said, and
  // best/ replaced when the loss improved under --save-best. Returns whether
  // --early-stop's patience has run out.
  auto on_eval = [&](int64_t step) -> bool {
    last_eval = evaluate(dp, s, group);
    last_eval_step = step;
    if (metrics) metrics->write({{"step", step}, {"val_loss", last_eval.loss}});
    const bool better = best_step < 0 || last_eval.loss < best_val;
    if (better) {
      best_val = last_eval.loss, best_step = step, evals_since_best = 0;
    } else {
      ++evals_since_best;
    }
    std::string line = "step " + std::to_string(step) + ": " + last_eval.str();
    if (better && o.save_best) {
      save(kBestCheckpoint, step);
      line += " -> " + std::string(kBestCheckpoint) + "/";
    } else if (!better && (o.save_best || o.early_stop > 0)) {
      char best[96];
      std::snprintf(best, sizeof best, " (best %.4f at step %lld)", best_val,
                    static_cast<long long>(best_step));
      line += best;
    }
    say(line);
    return o.early_stop > 0 && evals_since_best >= o.early_stop;
  };

  std::string where = s.ddp.enabled ? std::to_string(s.ddp.world) + " processes (" + group->name() +
                                          ", rank 0 on " + s.devices[0].str() + ")"
                                    : devices_str(s.devices);
  char header[512];
  std::snprintf(
      header, sizeof header,
      "fanout train: %.2fM parameters on %s | %s, loss on %s%s | %s%s | batch %lld x %lld%s | "
      "steps %lld..%lld | data %s (%lld tokens) | out %s",
      s.config.num_parameters() / 1e6, where.c_str(), o.strategy.c_str(), o.loss_on.c_str(),
      o.overlap ? ", overlap" : "", o.precision == "bf16" ? "bf16 mixed precision" : "fp32",
      o.grad_comm == "bf16" ? ", bf16 gradient sums" : "", static_cast<long long>(o.batch_size),
      static_cast<long long>(o.seq_len),
      o.grad_accum > 1 ? (" in " + std::to_string(o.grad_accum) + " micro-batches").c_str() : "",
      static_cast<long long>(start), static_cast<long long>(o.steps), s.train_data.path.c_str(),
      static_cast<long long>(s.train_data.token_count() + s.held_out), o.out.c_str());
  say(header);
  if (s.devices[0].is_cuda()) {
    std::string attention = "attention: ";
    attention += ops::attention_describe(s.devices[0], working);
    say(attention);
  }
  if (s.tokenizer_beside) {
    say("tokenizer: " + s.tokenizer->describe() + " (" + s.tokenizer_from +
        ", the one the data was prepared with)");
  } else if (!s.tokenizer->is_byte()) {
    say("tokenizer: " + s.tokenizer->describe());
  }
  if (o.resume == "auto") {  // Note [Resume auto] in train_setup.cpp
    say(s.resume ? "resuming from " + s.resume_dir + " (step " +
                       std::to_string(s.resume->state.step) + ")"
                 : "no checkpoint in " + o.out + ": starting fresh");
  } else if (s.resume) {
    say("resumed from " + s.resume_dir);
  }
  for (const std::string& note : s.notes) say(note);
  if (!history_note.empty()) say(history_note);
  for (const std::string& name : cleaned)
    say("removed " + name + " (left by an interrupted write)");
  if (s.has_val) {
    const int64_t batches = data::DataLoader(s.val_data, s.micro_rows, o.seq_len, o.packing == "on",
                                             false, 0, models::kIgnoreIndex)
                                .batches_per_epoch();
    if (o.val_batches > 0 && o.val_batches < batches) {
      say("held-out loss over the first " + std::to_string(o.val_batches) + " of " +
          std::to_string(batches) + " batches (--val-batches)");
    }
  }
  if (!o.trace.empty()) Trace::global().set_enabled(true);
  // Note [Stopping on a signal] (stop_signals.cpp); fanout launch, the parent, passes signals on.
  StopSignals signals(s.ddp.launcher == "fanout launch" ? ::getppid() : 0);

  std::string last_checkpoint = s.resume ? s.resume_dir : "";
  double last_loss = 0;
  int exit_code = 0;
  int64_t final_step = o.steps;  // earlier under --early-stop
  for (int64_t step = start; step <= o.steps; ++step) {
    auto t0 = Clock::now();
    double lr = schedule.at(step);
    std::vector<data::Batch> micro;
    int64_t counted = 0;
    if (step == kill_step) std::raise(SIGKILL);
    for (int64_t k = 0; k < o.grad_accum; ++k) {
      micro.push_back(loader.next());
      counted += micro.back().counted();  // the global batch: every rank knows the total
    }
    // An error inside the step (out of memory under --device-memory, a failed
    // device or rank) says which step it stopped.
    auto at_step = [&](const auto& fn) {
      try {
        fn();
      } catch (const Error& e) {
        signals.restore();
        detail::throw_error(detail::str_cat("step ", step, ": ", e.what()));
      }
    };
    double loss_sum = 0;
    at_step([&] {
      dp.zero_grad();
      for (int64_t k = 0; k < o.grad_accum; ++k) {
        parallel::LossStats st =
            dp.forward_backward(rank_rows(micro[k], s.ddp), models::kIgnoreIndex,
                                std::max<int64_t>(counted, 1), k + 1 == o.grad_accum);
        loss_sum += st.loss_sum;
      }
    });
    // Ranks agree on the loss and on stopping (a Ctrl-C seen by any rank).
    double shared[3] = {loss_sum, signals.requested() == SIGINT ? 1.0 : 0.0,
                        signals.requested() == SIGTERM ? 1.0 : 0.0};
    if (group) group->all_reduce_host(shared, 3);
    loss_sum = shared[0];
    const int stop_signal = shared[2] > 0 ? SIGTERM : shared[1] > 0 ? SIGINT : 0;
    const bool interrupted = stop_signal != 0;
    double loss = counted > 0 ? loss_sum / counted : 0.0;
    auto stop = [&](const char* what, double value) {
      signals.restore();
      detail::throw_error(detail::str_cat(
          "step ", step, ": the ", what, " is ", value, "; stopped before updating the weights",
          last_checkpoint.empty() ? std::string(" (no checkpoint was written yet)")
                                  : " (last good checkpoint: " + last_checkpoint + ")"));
    };
    if (!std::isfinite(loss)) stop("loss", loss);
    double norm = 0;
    at_step([&] {
      dp.reduce_gradients();
      norm = opt.step(step, static_cast<float>(lr), o.clip);
    });
    if (!std::isfinite(norm)) stop("gradient norm", norm);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    int64_t step_tokens = o.batch_size * o.seq_len;  // bounded by train_prepare
    tokens_seen = size_add("the tokens seen by the run", {tokens_seen, step_tokens});
    last_loss = loss;
    if (metrics)
      metrics->write({{"step", step},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", norm},
                      {"tokens_per_s", step_tokens / secs},
                      {"step_s", secs},
                      {"tokens", tokens_seen},
                      {"peak_bytes", memory_json(dp)}});
    progress.step({step, loss, lr, norm, step_tokens / secs, memory_str(dp)});
    bool stop_early = false;
    if (s.has_val && o.eval_every > 0 && step % o.eval_every == 0 && step != o.steps) {
      stop_early = on_eval(step);
    }
    // The run's last step is saved as final/ just after the loop: a step-N of the
    // same weights would be a second copy (an interrupted run writes no final/).
    const bool last_step = step == o.steps || stop_early;
    if ((o.save_every > 0 && step % o.save_every == 0 && !last_step) || interrupted) {
      last_checkpoint = save(checkpoint_step_name(step), step);
      // Only now that the new one is in place (checkpoint_rotation.h).
      if (main_rank) checkpoint_rotate(o.out, o.keep_last);
    }
    if (interrupted) {
      say(std::string(stop_signal == SIGTERM ? "terminated (SIGTERM)" : "interrupted") +
          " at step " + std::to_string(step) + ": checkpoint " + last_checkpoint +
          " (continue with --resume last --out " + o.out + ")");
      exit_code = 128 + stop_signal;
      break;
    }
    if (stop_early) {
      char line[192];
      std::snprintf(line, sizeof line,
                    "early stop at step %lld: no better held-out loss in %lld evaluations "
                    "(best %.4f at step %lld)",
                    static_cast<long long>(step), static_cast<long long>(o.early_stop), best_val,
                    static_cast<long long>(best_step));
      say(line);
      final_step = step;
      break;
    }
  }
  signals.restore();
  progress.finish();
  // The checkpoint first: nothing after the last step may lose the run.
  std::string final_dir = exit_code == 0 ? save("final", final_step) : "";
  if (!o.trace.empty() && main_rank) {
    Trace::global().set_enabled(false);
    Trace::global().write(o.trace);
    say("trace written to " + o.trace + " (open in ui.perfetto.dev)");
  }
  if (exit_code != 0) return exit_code;

  nlohmann::json summary = {
      {"steps", final_step}, {"loss", last_loss}, {"out", o.out}, {"checkpoint", final_dir}};
  if (final_step < o.steps) summary["early_stop"] = true;
  if (s.has_val) {
    // An early stop has just evaluated these weights.
    if (last_eval_step != final_step) on_eval(final_step);
    const double val = last_eval.loss;
    summary["val_loss"] = val;
    if (best_step >= 0) summary["best_val_loss"] = best_val, summary["best_step"] = best_step;
    char line[256] = "";
    if (s.embedded) {
      std::snprintf(line, sizeof line,
                    "held-out loss %.3f nats/token vs %.3f for the corpus's unigram entropy "
                    "(a model that ignores context)",
                    val, s.unigram);
      summary["unigram_entropy"] = s.unigram;
    } else if (main_rank) {
      // The training data's own unigram entropy (its first 2^27 tokens at most).
      const double unigram = data::token_data_unigram_entropy(s.train_data, int64_t{1} << 27);
      std::snprintf(line, sizeof line, "held-out loss %.3f nats/token vs %.3f for the unigram ",
                    val, unigram);
      summary["unigram_entropy"] = unigram;
    }
    say(s.embedded ? std::string(line)
                   : line + ("entropy of " + o.data + " (a model that ignores context)"));
  }
  // zero3 keeps no whole model on any device: the sample runs on a copy.
  std::vector<float> whole;
  if (!o.json && dpo.strategy == parallel::Strategy::zero3) {
    whole.resize(layout.total());
    dp.params_to_host(whole.data());
  }
  if (!main_rank) return 0;
  say("final checkpoint: " + final_dir);
  if (!o.json) {
    try {
      std::string sample;
      if (whole.empty()) {
        sample = sample_text(primary, *s.tokenizer, o.seed, 240);
      } else {
        models::LlamaModel copy(s.config, s.devices[0], "", working);
        tensor_upload(copy.compute_stream(), copy.params(), whole.data());
        copy.params_to_working(0, layout.total());
        sample = sample_text(copy, *s.tokenizer, o.seed, 240);
      }
      say("sample:\n  " + sample);
    } catch (const Error& e) {
      say(std::string("no sample: ") + e.what());
    }
  }
  if (o.json) std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace fanout::train
