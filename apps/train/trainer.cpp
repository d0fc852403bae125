#include "apps/train/trainer.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include "apps/train/checkpoint.h"
#include "apps/train/corpus.h"
#include "apps/train/data_loader.h"
#include "apps/train/loss_functions.h"
#include "apps/train/optimizer.h"
#include "apps/train/progress.h"
#include "apps/train/schedule.h"
#include "apps/train/token_file.h"
#include "apps/train/tokenizer.h"
#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_checkpoint.h"
#include "models/llama_generate.h"
#include "models/llama_model.h"

namespace fanout::train {

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C stops at once
}

constexpr int64_t kMaxEvalBatches = 20;

// Everything a run needs, resolved and validated before any file is written.
struct Setup {
  TrainOptions o;
  models::LlamaConfig config;
  std::vector<Device> devices;
  std::optional<Device> output_device;
  std::vector<int64_t> chunk_sizes;
  int64_t micro_rows = 0;
  TokenData train_data, val_data;
  bool has_val = false, embedded = false;
  double unigram = 0;
  std::optional<Checkpoint> resume;
  std::string resume_dir;
  std::vector<float> init_params;
};

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    FANOUT_CHECK(used > 0 && used == item.size() && v >= 0, "--micro-batch-sizes: '", item,
                 "' is not a row count");
    out.push_back(v);
  }
  return out;
}

std::string timestamp_dir() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "runs/%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

std::vector<Device> default_devices() {
  int n = cuda_device_count();
  std::vector<Device> d;
  if (n > 0) {
    for (int i = 0; i < n; ++i) d.push_back(cuda_device(i));
  } else {
    // One CPU device per core (Note [CPU device compute]).
    int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 0; i < cores; ++i) d.push_back(cpu_device(i));
  }
  return d;
}

Setup prepare(TrainOptions o, const std::set<std::string>& given) {
  Setup s;
  if (!o.resume.empty()) {
    std::string dir = o.resume;
    if (dir == "last") {
      FANOUT_CHECK(!o.out.empty(), "--resume last needs --out DIR (the run to continue)");
      dir = checkpoint_find_last(o.out);
    }
    s.resume = checkpoint_read(dir);
    s.resume_dir = dir;
    train_options_merge(o, s.resume->state.flags, given);
    if (o.out.empty()) o.out = fs::path(dir).lexically_normal().parent_path().string();
  }
  // --- the model
  if (s.resume) {
    s.config = s.resume->config;
  } else if (!o.init.empty()) {
    FANOUT_CHECK(!given.count("preset") && !given.count("config"),
                 "--init takes the model from its checkpoint: drop --preset and --config");
    s.config = models::llama_load_config(o.init);
    models::llama_read_weights(s.config, (fs::path(o.init) / "model.safetensors").string(),
                               s.init_params);
  } else if (!o.config.empty()) {
    s.config = models::llama_config_load(o.config);
  } else {
    s.config = models::llama_preset(o.preset);
  }
  if (o.seq_len == 0) {
    bool preset = o.config.empty() && o.init.empty();
    o.seq_len = preset ? preset_seq_len(o.preset)
                       : std::min<int64_t>(128, s.config.max_position_embeddings);
  }
  FANOUT_CHECK(o.seq_len > 0, "--seq-len must be positive, got ", o.seq_len);
  FANOUT_CHECK(o.seq_len <= s.config.max_position_embeddings, "--seq-len ", o.seq_len,
               " exceeds the model's max_position_embeddings (", s.config.max_position_embeddings,
               ")");
  // --- the optimisation
  FANOUT_CHECK(o.batch_size > 0, "--batch-size must be positive, got ", o.batch_size);
  FANOUT_CHECK(o.grad_accum > 0, "--grad-accum must be positive, got ", o.grad_accum);
  FANOUT_CHECK(o.batch_size % o.grad_accum == 0, "--batch-size ", o.batch_size,
               " is not a multiple of --grad-accum ", o.grad_accum);
  s.micro_rows = o.batch_size / o.grad_accum;
  FANOUT_CHECK(o.steps > 0, "--steps must be positive, got ", o.steps);
  FANOUT_CHECK(o.save_every >= 0, "--save-every must not be negative");
  FANOUT_CHECK(o.eval_every >= 0, "--eval-every must not be negative");
  FANOUT_CHECK(o.clip >= 0, "--clip must not be negative (0 turns clipping off)");
  FANOUT_CHECK(o.weight_decay >= 0, "--weight-decay must not be negative");
  FANOUT_CHECK(o.beta1 >= 0 && o.beta1 < 1, "--beta1 must be in [0, 1)");
  FANOUT_CHECK(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1)");
  FANOUT_CHECK(o.eps > 0, "--eps must be positive");
  FANOUT_CHECK(o.bucket_mb > 0, "--bucket-mb must be positive, got ", o.bucket_mb);
  Schedule{o.schedule, o.lr, o.min_lr, o.warmup, o.steps}.validate();
  FANOUT_CHECK(o.packing == "on" || o.packing == "off", "--packing must be on or off");
  FANOUT_CHECK(o.strategy == "dp" || o.strategy == "zero1" || o.strategy == "ddp",
               "--strategy must be dp, zero1 or ddp, got '", o.strategy, "'");
  FANOUT_CHECK(o.strategy != "ddp",
               "--strategy ddp runs one process per device: start it with fanout launch");
  FANOUT_CHECK(o.loss_on == "output" || o.loss_on == "replicas",
               "--loss-on must be output or replicas, got '", o.loss_on, "'");
  // --- devices
  s.devices = o.devices.empty() ? default_devices() : devices_parse(o.devices);
  for (const Device& d : s.devices) {
    FANOUT_CHECK(!d.is_bare(), "--devices needs indices (cpu:0,cpu:1); a bare '", d.str(),
                 "' is for --strategy ddp");
  }
  devices_check_available(s.devices);
  if (!o.output_device.empty()) {
    s.output_device = device_parse(o.output_device);
    FANOUT_CHECK(!s.output_device->is_bare(), "--output-device needs an index, e.g. cpu:0");
    devices_check_available({*s.output_device});
  }
  bool any_cpu = false;
  for (const Device& d : s.devices) any_cpu |= d.is_cpu();
  if (o.precision.empty()) o.precision = any_cpu ? "fp32" : "bf16";
  FANOUT_CHECK(o.precision == "fp32" || o.precision == "bf16", "--precision must be fp32 or bf16");
  FANOUT_CHECK(!(o.precision == "bf16" && any_cpu),
               "--precision bf16 needs CUDA devices (CPU devices train in fp32)");
  if (!o.micro_batch_sizes.empty()) {
    s.chunk_sizes = parse_sizes(o.micro_batch_sizes);
    FANOUT_CHECK(s.chunk_sizes.size() == s.devices.size(), "--micro-batch-sizes gives ",
                 s.chunk_sizes.size(), " sizes for ", s.devices.size(), " devices");
    int64_t sum = 0;
    for (int64_t c : s.chunk_sizes) sum += c;
    FANOUT_CHECK(sum == s.micro_rows, "--micro-batch-sizes add up to ", sum,
                 " rows but each micro-batch has ", s.micro_rows, " (--batch-size / --grad-accum)");
  }
  // --- data
  if (o.data.empty()) {
    Corpus corpus = default_corpus();
    s.train_data = corpus_token_data(corpus.train_documents, "<embedded default corpus: train>");
    s.val_data = corpus_token_data(corpus.heldout_documents, "<embedded default corpus: held out>");
    s.has_val = s.embedded = true;
    s.unigram = unigram_entropy(s.train_data.tokens);
  } else {
    s.train_data = token_file_load(o.data);
  }
  if (!o.val_data.empty()) {
    s.val_data = token_file_load(o.val_data);
    s.has_val = true;
  }
  token_data_check_vocab(s.train_data, s.config.vocab_size);
  if (s.has_val) token_data_check_vocab(s.val_data, s.config.vocab_size);
  if (o.packing == "off") {
    FANOUT_CHECK(s.config.vocab_size > kPad, "--packing off pads with id ", kPad,
                 ", which needs a vocabulary of at least ", kPad + 1, " tokens");
  }
  // Constructing loaders checks that the data holds at least one batch.
  DataLoader(s.train_data, s.micro_rows, o.seq_len, o.packing == "on", o.shuffle, o.seed,
             models::kIgnoreIndex);
  if (s.has_val) {
    DataLoader(s.val_data, s.micro_rows, o.seq_len, o.packing == "on", false, 0,
               models::kIgnoreIndex);
  }
  // --- the run directory
  if (o.out.empty()) o.out = timestamp_dir();
  if (!s.resume) {
    std::error_code ec;
    bool busy = fs::exists(o.out, ec) && !fs::is_empty(o.out, ec);
    FANOUT_CHECK(!busy, "--out ", o.out, " already holds files: continue it with --resume last ",
                 "or choose another --out");
  }
  s.o = o;
  return s;
}

std::string memory_str(parallel::DataParallel& dp) {
  std::string out;
  std::vector<Device> seen;
  for (int r = 0; r < dp.size(); ++r) {
    Device d = dp.replica(r).device();
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
    seen.push_back(d);
    out += (out.empty() ? "" : " ") + d.str() + " " + bytes_str(dp.memory(r).total.peak);
  }
  return out;
}

nlohmann::json memory_json(parallel::DataParallel& dp) {
  nlohmann::json j = nlohmann::json::object();
  for (int r = 0; r < dp.size(); ++r) j[dp.replica(r).device().str()] = dp.memory(r).total.peak;
  return j;
}

double evaluate(parallel::DataParallel& dp, const Setup& s) {
  DataLoader loader(s.val_data, s.micro_rows, s.o.seq_len, s.o.packing == "on", false, 0,
                    models::kIgnoreIndex);
  int64_t n = std::min(loader.batches_per_epoch(), kMaxEvalBatches);
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    Batch b = loader.next();
    parallel::LossStats st =
        dp.evaluate({b.B, b.T, b.inputs.data(), b.targets.data()}, models::kIgnoreIndex);
    sum += st.loss_sum, count += st.count;
  }
  return count > 0 ? sum / count : 0.0;
}

std::string sample_text(models::LlamaModel& model, uint64_t seed, int64_t length) {
  int64_t max_len = std::min<int64_t>(length + 1, model.config().max_position_embeddings);
  models::LlamaGenerator gen(model, max_len);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out;
  std::vector<float> logits = gen.feed({model.config().vocab_size > kBot ? kBot : 0});
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
    if (next == kEot) break;
    out.push_back(next);
    if (i + 1 < max_len) logits = gen.feed({next});
  }
  return byte_decode(out);
}

}  // namespace

int train_run(TrainOptions options, const std::set<std::string>& given) {
  Setup s = prepare(std::move(options), given);
  const TrainOptions& o = s.o;
  // From here on files are written.
  fs::create_directories(o.out);
  models::LlamaLayout layout(s.config);

  parallel::DataParallelOptions dpo;
  dpo.device_ids = s.devices;
  dpo.output_device = s.output_device;
  dpo.chunk_sizes = s.chunk_sizes;
  dpo.strategy = o.strategy == "zero1" ? parallel::Strategy::zero1 : parallel::Strategy::dp;
  dpo.loss_on = o.loss_on == "output" ? parallel::LossOn::output : parallel::LossOn::replicas;
  dpo.overlap = o.overlap;
  dpo.bucket_mb = o.bucket_mb;
  const std::vector<Device>& ids = s.devices;
  auto factory = [&](Device d, int i) {
    return std::make_unique<models::LlamaModel>(s.config, d,
                                                parallel::replica_lane(ids, i, "compute"));
  };
  parallel::DataParallel dp(factory, dpo, cross_entropy_loss_functions());
  auto& primary = dynamic_cast<models::LlamaModel&>(dp.primary());
  if (s.resume) {
    tensor_upload(primary.compute_stream(), primary.params(), s.resume->params.data());
  } else if (!s.init_params.empty()) {
    tensor_upload(primary.compute_stream(), primary.params(), s.init_params.data());
  } else {
    primary.init_random(o.seed);
  }
  dp.params_changed();
  ops::AdamWConfig adam;
  adam.lr = static_cast<float>(o.lr), adam.beta1 = static_cast<float>(o.beta1);
  adam.beta2 = static_cast<float>(o.beta2), adam.eps = static_cast<float>(o.eps);
  adam.weight_decay = static_cast<float>(o.weight_decay);
  Optimizer opt(dp, decay_runs(layout), adam);
  DataLoader loader(s.train_data, s.micro_rows, o.seq_len, o.packing == "on", o.shuffle, o.seed,
                    models::kIgnoreIndex);
  int64_t start = 1, tokens_seen = 0;
  if (s.resume) {
    opt.state_from_host(s.resume->exp_avg, s.resume->exp_avg_sq);
    loader.set_state(s.resume->state.data);
    start = s.resume->state.step + 1;
    tokens_seen = s.resume->state.tokens_seen;
  }
  Schedule schedule{o.schedule, o.lr, o.min_lr, o.warmup, o.steps};
  MetricsLog metrics((fs::path(o.out) / "metrics.jsonl").string(), start - 1);
  Progress progress(o.steps, start, o.json);

  auto save = [&](const std::string& name, int64_t step) {
    Checkpoint c;
    c.config = s.config;
    c.params.resize(layout.total());
    tensor_to_host(primary.compute_stream(), primary.params(), c.params.data());
    opt.state_to_host(c.exp_avg, c.exp_avg_sq);
    c.state.step = step;
    c.state.data = loader.state();
    c.state.seed = o.seed;
    c.state.tokens_seen = tokens_seen;
    c.state.flags = train_options_to_json(o);
    std::string dir = (fs::path(o.out) / name).string();
    checkpoint_write(dir, c);
    return dir;
  };

  char header[512];
  std::snprintf(
      header, sizeof header,
      "fanout train: %.2fM parameters on %s | %s, loss on %s%s | batch %lld x %lld%s | "
      "steps %lld..%lld | data %s (%zu tokens) | out %s",
      s.config.num_parameters() / 1e6, devices_str(s.devices).c_str(), o.strategy.c_str(),
      o.loss_on.c_str(), o.overlap ? ", overlap" : "", static_cast<long long>(o.batch_size),
      static_cast<long long>(o.seq_len),
      o.grad_accum > 1 ? (" in " + std::to_string(o.grad_accum) + " micro-batches").c_str() : "",
      static_cast<long long>(start), static_cast<long long>(o.steps), s.train_data.path.c_str(),
      s.train_data.tokens.size(), o.out.c_str());
  progress.message(header);
  if (s.resume) progress.message("resumed from " + s.resume_dir);
  if (!o.trace.empty()) Trace::global().set_enabled(true);
  g_interrupted = false;
  auto previous = std::signal(SIGINT, on_sigint);

  std::string last_checkpoint = s.resume ? s.resume_dir : "";
  double last_loss = 0;
  int exit_code = 0;
  for (int64_t step = start; step <= o.steps; ++step) {
    auto t0 = Clock::now();
    double lr = schedule.at(step);
    std::vector<Batch> micro;
    int64_t counted = 0;
    for (int64_t k = 0; k < o.grad_accum; ++k) {
      micro.push_back(loader.next());
      counted += micro.back().counted();
    }
    dp.zero_grad();
    double loss_sum = 0;
    for (int64_t k = 0; k < o.grad_accum; ++k) {
      const Batch& b = micro[k];
      parallel::LossStats st =
          dp.forward_backward({b.B, b.T, b.inputs.data(), b.targets.data()}, models::kIgnoreIndex,
                              std::max<int64_t>(counted, 1), k + 1 == o.grad_accum);
      loss_sum += st.loss_sum;
    }
    double loss = counted > 0 ? loss_sum / counted : 0.0;
    auto stop = [&](const char* what, double value) {
      std::signal(SIGINT, previous);
      detail::throw_error(detail::str_cat(
          "step ", step, ": the ", what, " is ", value, "; stopped before updating the weights",
          last_checkpoint.empty() ? std::string(" (no checkpoint was written yet)")
                                  : " (last good checkpoint: " + last_checkpoint + ")"));
    };
    if (!std::isfinite(loss)) stop("loss", loss);
    dp.reduce_gradients();
    double norm = opt.step(step, static_cast<float>(lr), o.clip);
    if (!std::isfinite(norm)) stop("gradient norm", norm);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    int64_t step_tokens = o.batch_size * o.seq_len;
    tokens_seen += step_tokens;
    last_loss = loss;
    metrics.write({{"step", step},
                   {"loss", loss},
                   {"lr", lr},
                   {"grad_norm", norm},
                   {"tokens_per_s", step_tokens / secs},
                   {"step_s", secs},
                   {"tokens", tokens_seen},
                   {"peak_bytes", memory_json(dp)}});
    progress.step({step, loss, lr, norm, step_tokens / secs, memory_str(dp)});
    if (s.has_val && o.eval_every > 0 && step % o.eval_every == 0 && step != o.steps) {
      double val = evaluate(dp, s);
      metrics.write({{"step", step}, {"val_loss", val}});
      progress.message("step " + std::to_string(step) + ": held-out loss " + std::to_string(val));
    }
    bool interrupted = g_interrupted.load();
    if ((o.save_every > 0 && step % o.save_every == 0) || interrupted) {
      last_checkpoint = save(checkpoint_step_name(step), step);
    }
    if (interrupted) {
      progress.message("interrupted at step " + std::to_string(step) + ": checkpoint " +
                       last_checkpoint + " (continue with --resume last --out " + o.out + ")");
      exit_code = 130;
      break;
    }
  }
  std::signal(SIGINT, previous);
  progress.finish();
  if (!o.trace.empty()) {
    Trace::global().set_enabled(false);
    Trace::global().write(o.trace);
    progress.message("trace written to " + o.trace + " (open in ui.perfetto.dev)");
  }
  if (exit_code != 0) return exit_code;

  std::string final_dir = save("final", o.steps);
  nlohmann::json summary = {
      {"steps", o.steps}, {"loss", last_loss}, {"out", o.out}, {"checkpoint", final_dir}};
  if (s.has_val) {
    double val = evaluate(dp, s);
    metrics.write({{"step", o.steps}, {"val_loss", val}});
    summary["val_loss"] = val;
    char line[256];
    if (s.embedded) {
      std::snprintf(line, sizeof line,
                    "held-out loss %.3f nats/token vs %.3f for the corpus's unigram entropy "
                    "(a model that ignores context)",
                    val, s.unigram);
      summary["unigram_entropy"] = s.unigram;
    } else {
      std::snprintf(line, sizeof line, "held-out loss %.4f nats/token", val);
    }
    progress.message(line);
  }
  progress.message("final checkpoint: " + final_dir);
  if (!o.json) {
    std::string sample = sample_text(primary, o.seed, 240);
    progress.message("sample:\n  " + sample);
  }
  if (o.json) std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace fanout::train
