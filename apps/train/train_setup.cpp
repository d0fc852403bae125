#include "apps/train/train_setup.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "apps/train/corpus.h"
#include "apps/train/data_loader.h"
#include "apps/train/schedule.h"
#include "apps/train/tokenizer.h"
#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"
#include "models/llama_checkpoint.h"
#include "models/llama_model.h"

namespace fanout::train {

namespace {
namespace fs = std::filesystem;

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

}  // namespace

Setup train_prepare(TrainOptions o, const std::set<std::string>& given) {
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
    // A ddp run's checkpoint resumes in one process too (the files are the same):
    // ddp is kept only where the launcher's environment is present.
    if (o.strategy == "ddp" && !given.count("strategy") && std::getenv("RANK") == nullptr) {
      o.strategy = "dp";
    }
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
  FANOUT_CHECK(!s.resume || o.steps >= s.resume->state.step, "--steps ", o.steps,
               " is below the resumed checkpoint's step ", s.resume ? s.resume->state.step : 0);
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
  if (o.strategy == "ddp") s.ddp = ddp_env_from_environment();
  FANOUT_CHECK(o.loss_on == "output" || o.loss_on == "replicas",
               "--loss-on must be output or replicas, got '", o.loss_on, "'");
  // --- devices
  if (s.ddp.enabled) {
    std::vector<Device> listed =
        o.devices.empty() ? std::vector<Device>{cuda_device_count() > 0 ? device_parse("cuda")
                                                                        : device_parse("cpu")}
                          : devices_parse(o.devices);
    s.devices = {ddp_device(s.ddp, listed)};
  } else {
    s.devices = o.devices.empty() ? default_devices() : devices_parse(o.devices);
  }
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
  FANOUT_CHECK(!(s.ddp.enabled && !o.micro_batch_sizes.empty()),
               "--micro-batch-sizes splits rows over the devices of one process; under ddp each "
               "rank takes its rows of every batch");
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
  DataLoader train_loader(s.train_data, s.micro_rows, o.seq_len, o.packing == "on", o.shuffle,
                          o.seed, models::kIgnoreIndex);
  if (s.resume) train_loader.set_state(s.resume->state.data);  // the saved position must fit
  if (s.has_val) {
    DataLoader(s.val_data, s.micro_rows, o.seq_len, o.packing == "on", false, 0,
               models::kIgnoreIndex);
  }
  if (!o.trace.empty()) {
    fs::path parent = fs::path(o.trace).parent_path();
    FANOUT_CHECK(parent.empty() || fs::is_directory(parent), "--trace ", o.trace,
                 ": the folder does not exist");
  }
  // --- the run directory
  if (o.out.empty()) o.out = timestamp_dir();
  if (!s.resume && s.ddp.is_main()) {  // only rank 0 writes (and so checks) the run directory
    std::error_code ec;
    bool busy = fs::exists(o.out, ec) && !fs::is_empty(o.out, ec);
    FANOUT_CHECK(!busy, "--out ", o.out, " already holds files: continue it with --resume last ",
                 "or choose another --out");
  }
  s.o = o;
  return s;
}

}  // namespace fanout::train
