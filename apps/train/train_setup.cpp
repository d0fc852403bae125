#include "apps/train/train_setup.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "apps/data/data_loader.h"
#include "apps/data/tokenizer.h"
#include "apps/train/batch_finder.h"
#include "apps/train/checkpoint_rotation.h"
#include "apps/train/device_memory.h"
#include "apps/train/run_dir.h"
#include "apps/train/schedule.h"
#include "apps/train/train_batch.h"
#include "apps/train/train_data.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/file_io.h"
#include "engine/core/number_text.h"
#include "engine/distributed/launcher_env.h"
#include "models/llama_checkpoint.h"
#include "models/llama_model.h"
#include "models/safetensors_index.h"

namespace fanout::train {

namespace {
namespace fs = std::filesystem;

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

// --out must be a directory that can be created and written (checked before any write).
void check_out_dir(const std::string& out) {
  std::error_code ec;
  fs::path p = fs::path(out);
  // A symlink to nothing looks missing, yet no directory can be made there.
  if (fs::is_symlink(fs::symlink_status(p, ec)) && !fs::exists(fs::status(p, ec))) {
    const fs::path target = fs::read_symlink(p, ec);
    detail::throw_error(detail::str_cat("--out ", out, " is a symbolic link to ", target.string(),
                                        ", which does not exist: create that directory, remove "
                                        "the link, or choose another --out"));
  }
  // Missing, or under a file (ENOTDIR): the ancestors below say which.
  auto missing = [](const std::error_code& e) {
    return e == std::errc::no_such_file_or_directory || e == std::errc::not_a_directory;
  };
  const fs::file_status st = fs::status(p, ec);
  if (ec && !missing(ec)) {
    detail::throw_error(detail::str_cat("--out ", out, ": ", ec.message()));
  }
  if (fs::exists(st)) {
    FANOUT_CHECK(fs::is_directory(st), "--out ", out, ": exists and is not a directory");
    FANOUT_CHECK(::access(p.c_str(), W_OK | X_OK) == 0, "--out ", out, ": not writable (",
                 std::strerror(errno), ")");
    return;
  }
  // The nearest existing ancestor must be a writable directory.
  fs::path up = p.lexically_normal();
  while (true) {
    up = up.has_relative_path() && up.has_parent_path() ? up.parent_path() : fs::path(".");
    if (up.empty()) up = ".";
    const fs::file_status ust = fs::status(up, ec);
    if (ec && !missing(ec)) {
      detail::throw_error(detail::str_cat("--out ", out, ": ", up.string(), ": ", ec.message()));
    }
    if (fs::exists(ust)) {
      FANOUT_CHECK(fs::is_directory(ust), "--out ", out, ": ", up.string(), " is not a directory");
      FANOUT_CHECK(::access(up.c_str(), W_OK | X_OK) == 0, "--out ", out, ": cannot create it in ",
                   up.string(), " (", std::strerror(errno), ")");
      return;
    }
    if (up == "." || up == "/") return;
  }
}

// --trace is a result (file_io.h), never one of the run's inputs; its folder may be
// --out itself, which the run creates before it writes the trace at the end.
void check_trace(const TrainOptions& o) {
  const std::vector<std::string> inputs = {o.data, o.val_data, o.config,
                                           o.tokenizer == "byte" ? "" : o.tokenizer,
                                           (fs::path(o.out) / "metrics.jsonl").string()};
  std::error_code ec;
  fs::path folder = fs::path(o.trace).parent_path();
  if (folder.empty()) folder = ".";
  const bool in_new_out = !fs::exists(fs::symlink_status(o.out, ec)) &&
                          fs::weakly_canonical(fs::absolute(folder), ec) ==
                              fs::weakly_canonical(fs::absolute(o.out), ec);
  if (!in_new_out) file_check_output(o.trace, "--trace", {inputs, "", nullptr});
}

// Whether `name` is something a fanout run writes in its --out: the lock,
// metrics.jsonl, curves.svg, a checkpoint (step-N, final) or a temporary of one of them
// (NAME.tmp-*, NAME.old-*) that an interrupted write left. `checkpoint` is set for
// a checkpoint or its complete copy renamed aside (what checkpoint_find_last reads).
bool run_dir_entry(std::string name, bool& checkpoint) {
  checkpoint = false;
  if (name == kRunLockFile) return true;
  bool temp = false;
  for (const char* tag : {".tmp-", ".old-"}) {
    if (size_t at = name.find(tag); at != std::string::npos && at > 0) {
      temp |= tag[1] == 't';
      name.resize(at);
    }
  }
  // curves.svg: drawn from metrics.jsonl when a run ends (apps/fanout/cmd_train.cpp).
  if (name == "metrics.jsonl" || name == "curves.svg" || name == kBestCheckpoint) return true;
  const bool step = name.size() > 5 && name.rfind("step-", 0) == 0 &&
                    name.find_first_not_of("0123456789", 5) == std::string::npos;
  checkpoint = (step || name == "final") && !temp;
  return step || name == "final";
}

// Note [Resume auto]
// `--resume auto` lets one command line serve every attempt of a restarted job
// (`fanout launch --max-restarts`): the newest complete checkpoint in --out, found
// as --resume last finds it, or "" to start fresh when --out is missing, empty or
// holds only what a run writes before its first checkpoint (the lock, metrics.jsonl,
// temporaries of an interrupted write, which find_last never takes). Anything else
// is someone else's directory and is refused. Checkpoints are written atomically
// (Note [Atomic checkpoint directory]), so one being written when a rank was killed
// is never taken. Every rank decides on the same shared --out before any of them
// writes (rank 0 writes only after the rendezvous), and the trainer checks that
// all ranks start at the same step.
std::string resume_auto_dir(const std::string& out, std::string* passed_over) {
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    detail::throw_error(detail::str_cat("--resume auto: --out ", out, ": ", ec.message()));
  }
  if (!fs::exists(st)) return "";
  FANOUT_CHECK(fs::is_directory(st), "--resume auto: --out ", out, " is not a directory");
  bool any_checkpoint = false;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    bool checkpoint = false;
    FANOUT_CHECK(run_dir_entry(name, checkpoint), "--resume auto: --out ", out, " holds '", name,
                 "', which no fanout run writes: it is not a run directory; choose another --out");
    any_checkpoint |= checkpoint;
  }
  if (ec) detail::throw_error(detail::str_cat("--resume auto: --out ", out, ": ", ec.message()));
  return any_checkpoint ? checkpoint_find_last(out, passed_over) : "";
}

// Note [A run's tokenizer]
// A checkpoint carries the tokenizer its run trained with (tokenizer.json), so a
// resumed run (or one started from --init) keeps it: a --tokenizer given again must
// be the same tokenizer (compared as the tokenizer.json each writes), anything else
// would change what every id means. Checkpoints from before tokenizers carry none:
// their runs used the byte tokenizer. An --init folder without tokenizer.json (an HF
// model folder) takes --tokenizer, or bytes.
//
// Token files carry no tokenizer, but `fanout prepare` leaves the one it encoded
// with beside them (DIR/tokenizer.json): a run on them takes it when nothing else
// names one, and refuses a --tokenizer, a checkpoint's tokenizer or the other data
// file's that is another tokenizer (compared the same way), since ids decoded by
// another tokenizer are noise. Token files with none beside them (llm.c's, older
// fanout's) train as they always did.
std::shared_ptr<const data::TextTokenizer> run_tokenizer(const TrainOptions& o, Setup& s) {
  std::shared_ptr<const data::TextTokenizer> flag;
  if (!o.tokenizer.empty()) flag = data::tokenizer_resolve(o.tokenizer);
  std::shared_ptr<const data::TextTokenizer> carried;
  std::string from;
  if (s.resume) {
    from = s.resume_dir;
    carried = s.resume->tokenizer_json.empty()
                  ? data::byte_tokenizer()
                  : data::tokenizer_from_json(s.resume->tokenizer_json,
                                              (fs::path(from) / "tokenizer.json").string());
  } else if (!o.init.empty() && fs::exists(fs::path(o.init) / "tokenizer.json")) {
    from = o.init;  // an --init folder without one (any HF model folder) takes --tokenizer
    carried = checkpoint_tokenizer(o.init);
  }
  FANOUT_CHECK(!carried || !flag || flag->to_json() == carried->to_json(), "--tokenizer ",
               o.tokenizer, " (", flag ? flag->describe() : "",
               ") is not the tokenizer checkpoint ", from, " was trained with (",
               carried ? carried->describe() : "",
               "): drop --tokenizer, the run keeps the checkpoint's");
  // The tokenizer beside --data's and --val-data's token files; both must agree.
  std::shared_ptr<const data::TextTokenizer> beside;
  std::string beside_path, beside_of;
  for (const std::string* file : {&o.data, &o.val_data}) {
    const std::string path = data::token_file_tokenizer_path(*file);
    if (path.empty()) continue;
    auto found = data::tokenizer_load(path);
    if (beside) {
      FANOUT_CHECK(found->to_json() == beside->to_json(), "--val-data ", o.val_data,
                   " was prepared with another tokenizer (", path, ", ", found->describe(),
                   ") than --data ", o.data, " (", beside_path, ", ", beside->describe(),
                   "): prepare both with one tokenizer");
      continue;
    }
    beside = std::move(found), beside_path = path, beside_of = *file;
  }
  const std::string beside_json = beside ? beside->to_json() : "";
  if (beside && flag) {
    FANOUT_CHECK(flag->to_json() == beside_json, "--tokenizer ", o.tokenizer, " (",
                 flag->describe(), ") is not the tokenizer ", beside_of, " was prepared with (",
                 beside_path, ", ", beside->describe(),
                 "): drop --tokenizer, the run takes the one beside the data");
  }
  if (beside && carried) {
    FANOUT_CHECK(carried->to_json() == beside_json, beside_of, " was prepared with ", beside_path,
                 " (", beside->describe(), "), not the tokenizer checkpoint ", from,
                 " was trained with (", carried->describe(),
                 "): train on data prepared with the checkpoint's tokenizer");
  }
  if (!carried) {
    if (flag) {
      s.tokenizer_from = o.tokenizer;
      return flag;
    }
    if (beside) {
      s.tokenizer_from = beside_path, s.tokenizer_beside = true;
      return beside;
    }
    return data::byte_tokenizer();
  }
  s.tokenizer_from = (fs::path(from) / "tokenizer.json").string();
  return carried;
}

// Every id of the tokenizer must have an embedding row.
void check_tokenizer_fits(const TrainOptions& o, const Setup& s) {
  const int64_t have = s.config.vocab_size, need = s.tokenizer->vocab_size();
  if (need <= have) return;
  const std::string name = s.tokenizer_from.empty() ? "the tokenizer" : s.tokenizer_from;
  std::string model, fix;
  if (s.resume || !o.init.empty()) {
    model = "the checkpoint's model has " + std::to_string(have);
    fix = "train a new model (--preset or --config) for this tokenizer";
  } else if (!o.config.empty()) {
    model = "the config " + o.config + " has vocab_size " + std::to_string(have);
    fix = "use a config with vocab_size >= " + std::to_string(need);
  } else {
    model = "the preset '" + o.preset + "' has " + std::to_string(have);
    fix = "use a config with vocab_size >= " + std::to_string(need);
    for (const std::string& p : models::llama_preset_names()) {
      if (models::llama_preset(p).vocab_size >= need) {
        fix = "use --preset " + p + " or a config with vocab_size >= " + std::to_string(need);
        break;
      }
    }
  }
  detail::throw_error(detail::str_cat(name, " has ", need, " tokens but ", model, ": ", fix));
}

}  // namespace

namespace {

// --resume DIR, last or auto: the checkpoint, its settings merged under the
// flags given again, and what a resumed run keeps from its start.
void prepare_resume(TrainOptions& o, Setup& s, const std::set<std::string>& given) {
  std::string dir = o.resume;
  std::string passed_over;  // a newer entry of --out that is no complete checkpoint
  if (dir == "auto") {
    // The same command starts the run and continues it (Note [Resume auto]): the
    // model flags serve the fresh start, a checkpoint carries its own model.
    FANOUT_CHECK(!o.out.empty(),
                 "--resume auto needs --out DIR (where the run keeps its checkpoints)");
    dir = resume_auto_dir(o.out, &passed_over);
  } else if (!dir.empty()) {
    // The checkpoint carries its model: a second source would be ignored or conflict.
    for (const char* flag : {"preset", "config", "init"}) {
      FANOUT_CHECK(!given.count(flag), "--resume continues the checkpoint's model: drop --", flag);
    }
    if (dir == "last") {
      FANOUT_CHECK(!o.out.empty(), "--resume last needs --out DIR (the run to continue)");
      dir = checkpoint_find_last(o.out, &passed_over);
    }
  }
  if (!passed_over.empty()) {
    s.notes.push_back("note: " + passed_over +
                      ", so it is not a complete checkpoint: the run goes on from the newest "
                      "complete one instead");
  }
  if (!dir.empty()) {
    s.resume = checkpoint_read(dir);
    s.resume_dir = dir;
    const TrainOptions saved = [&] {
      TrainOptions t;
      train_options_merge(t, s.resume->state.flags, {});
      return t;
    }();
    train_options_merge(o, s.resume->state.flags, given);
    s.saved_steps = saved.steps;
    s.saved_rows_per_batch = saved.batch_size / std::max<int64_t>(saved.grad_accum, 1);
    s.saved_seq_len = saved.seq_len;
    // The held-out split is the run's from its start (Note [A run's own held-out split]).
    if (o.val_split != saved.val_split) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "note: --val-split %g is ignored: a resumed run keeps the held-out split it "
                    "started with (%g)",
                    o.val_split, saved.val_split);
      s.notes.push_back(line);
      o.val_split = saved.val_split;
    }
    // A ddp run's checkpoint resumes in one process too (the files are the same):
    // ddp is kept only where the launcher's environment is present (a zero run
    // stays sharded, over the devices of one process).
    if (parallel::strategy_flag_parse(o.strategy).processes && !given.count("strategy") &&
        !distributed::launcher_env_found(distributed::env_lookup_process)) {
      o.strategy = "dp";
    }
    if (o.out.empty()) o.out = fs::path(dir).lexically_normal().parent_path().string();
  }
}

// The model: the checkpoint's, --init's, --config's or the preset's, and --seq-len.
void prepare_model(TrainOptions& o, Setup& s, const std::set<std::string>& given) {
  if (s.resume) {
    s.config = s.resume->config;
  } else if (!o.init.empty()) {
    FANOUT_CHECK(!given.count("preset") && !given.count("config"),
                 "--init takes the model from its checkpoint: drop --preset and --config");
    s.config = models::llama_load_config(o.init);
    models::llama_read_weights(s.config, models::safetensors_model_path(o.init), s.init_params);
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
  train_options_validate(o);
  FANOUT_CHECK(o.seq_len > 0, "--seq-len must be positive, got ", o.seq_len);
  FANOUT_CHECK(o.seq_len <= s.config.max_position_embeddings, "--seq-len ", o.seq_len,
               " exceeds the model's max_position_embeddings (", s.config.max_position_embeddings,
               ")");
}

// Batch geometry, the schedule, the strategy and (ddp, zero across processes)
// the launcher's environment.
void prepare_optimisation(TrainOptions& o, Setup& s, const std::set<std::string>& given) {
  FANOUT_CHECK(!s.resume || o.steps >= s.resume->state.step, "--steps ", o.steps,
               " is below the resumed checkpoint's step ", s.resume ? s.resume->state.step : 0);
  Schedule schedule{o.schedule, o.lr, o.min_lr, o.warmup, o.steps};
  schedule.validate();
  if (s.resume && o.steps != s.saved_steps && schedule.uses_horizon()) {
    // Note [Extending a run]: the schedule's horizon is --steps, so a resumed run with
    // another --steps continues on a stretched (or shrunk) curve: said, not hidden.
    // A constant schedule has no horizon, so nothing to say.
    const int64_t next = s.resume->state.step + 1;
    const int64_t was_at = std::min(next, s.saved_steps);  // past a finished run's end: its last
    Schedule before = schedule;
    before.steps = s.saved_steps;
    char line[320];
    std::snprintf(line, sizeof line,
                  "note: --steps %lld changes the schedule's horizon from %lld steps: the "
                  "learning rate at step %lld is %.3g (the original schedule gives %.3g at step "
                  "%lld)",
                  static_cast<long long>(o.steps), static_cast<long long>(s.saved_steps),
                  static_cast<long long>(next), schedule.at(next), before.at(was_at),
                  static_cast<long long>(was_at));
    s.notes.push_back(line);
  }
  // ddp overlaps its bucketed all-reduce with backward unless --no-overlap says
  // otherwise, as PyTorch DDP and the bench's ddp row do.
  s.strategy = parallel::strategy_flag_parse(o.strategy);
  s.loss_on = parallel::loss_on_parse(o.loss_on);
  // (--graphs on records backward whole: no overlap unless asked for, and then refused.)
  if (s.strategy.processes && !given.count("overlap") && !s.resume && o.graphs != "on")
    o.overlap = true;
  graphs_parse(o, o.strategy, o.loss_on);
  if (!o.offload.empty()) {
    // Note [Optimizer offload] in optimizer.cpp: over DataParallel's shards.
    FANOUT_CHECK(o.pp == 1 && o.tp == 1, "--offload optimizer works with --strategy dp, zero1, ",
                 "zero2 or zero3; a --", o.pp > 1 ? "pp" : "tp",
                 " grid keeps each stage's optimizer on its devices");
    FANOUT_CHECK(!(s.strategy.processes && s.strategy.strategy == parallel::Strategy::dp),
                 "--offload optimizer works with --strategy dp, zero1, zero2 or zero3; under ddp "
                 "every process would keep a whole copy in host memory: use --strategy zero1 (or "
                 "zero2, zero3) across the processes");
  }
  const bool zero = s.strategy.strategy != parallel::Strategy::dp;
  if (s.strategy.processes ||
      (zero && distributed::launcher_env_found(distributed::env_lookup_process))) {
    // ddp, or zero1/zero2/zero3 sharded over the processes of a launcher.
    s.ddp = ddp_env_from_environment();
  } else if (const char* world = std::getenv("WORLD_SIZE"); world && *world) {
    // Under a launcher every rank would train alone on the same --out.
    const int64_t n =
        parse_whole_number(world, 1, distributed::kMaxWorldSize, "environment variable WORLD_SIZE");
    FANOUT_CHECK(n == 1, "WORLD_SIZE=", world,
                 " says this is one of several processes, but --strategy ", o.strategy,
                 " trains in one process: use --strategy ddp, zero1, zero2 or zero3 under a "
                 "launcher");
  }
}

// The devices (ddp: this rank's), the output device, their caps and the rows
// each replica takes.
void prepare_devices(TrainOptions& o, Setup& s) {
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
  attention_apply(o.attention, precision_dtype(o.precision), s.devices);
  gemm_algo_apply(o.gemm_algo, precision_dtype(o.precision) == DType::bf16, s.devices);
  o.projections = projections_apply(o.projections, s.devices);
  o.graphs = graphs_resolve(o, s.devices);  // strategy, loss and overlap are settled
  precision_dtype(o.grad_comm, "--grad-comm");
  if (!o.output_device.empty()) {
    s.output_device = device_parse(o.output_device);
    FANOUT_CHECK(!s.output_device->is_bare(), "--output-device needs an index, e.g. cpu:0");
    devices_check_available({*s.output_device});
    // Only the devices trained on are measured and reported.
    FANOUT_CHECK(std::find(s.devices.begin(), s.devices.end(), *s.output_device) != s.devices.end(),
                 "--output-device ", o.output_device,
                 " is not one of the devices this run trains on (", devices_str(s.devices),
                 "): list it in --devices, or leave --output-device out "
                 "(the first device)");
  }
  {  // Before any model is built: each device's cap (--device-memory; none without it).
    std::vector<Device> capped = s.devices;
    if (s.output_device) capped.push_back(*s.output_device);
    apply_device_memory(
        o.device_memory.empty() ? 0 : parse_byte_size(o.device_memory, "--device-memory"), capped);
  }
}

// The model's size, the tokenizer, and the data (setup_batch then checks that it
// holds a batch, and maps a resumed position onto this run's batches).
void prepare_data(TrainOptions& o, Setup& s) {
  models::llama_config_check_memory(s.config, "the model", true);
  s.tokenizer = run_tokenizer(o, s);
  // The byte tokenizer keeps today's rule (ids are checked as the data loads); any
  // other, or one named (--tokenizer, or beside the data), must fit the model whole.
  if (!s.tokenizer->is_byte() || !o.tokenizer.empty() || s.tokenizer_beside) {
    check_tokenizer_fits(o, s);
  }
  train_data_load(o, s);
}

// The run directory (rank 0 alone writes it) and the trace file.
void prepare_run_dir(TrainOptions& o, Setup& s) {
  if (o.out.empty()) o.out = timestamp_dir();
  if (s.ddp.is_main()) check_out_dir(o.out);
  if (!o.trace.empty() && s.ddp.is_main()) check_trace(o);  // only rank 0 writes it
  // only rank 0 writes (and so checks) the run directory; --resume auto checked it already
  if (!s.resume && o.resume != "auto" && s.ddp.is_main()) {
    std::error_code ec;
    bool busy = fs::exists(o.out, ec) && !fs::is_empty(o.out, ec) && !run_dir_only_ours(o.out);
    FANOUT_CHECK(!busy, "--out ", o.out, " already holds files: continue it with --resume last ",
                 "or choose another --out");
  }
}

}  // namespace

Setup train_prepare(TrainOptions o, const std::set<std::string>& given) {
  Setup s;
  prepare_resume(o, s, given);
  prepare_model(o, s, given);
  prepare_optimisation(o, s, given);
  prepare_devices(o, s);
  batch_auto_check(o, given, setup_replicas(o, s));
  // --batch-size auto starts from the smallest batch; the finder tries larger ones.
  if (o.batch_size_auto) {
    o.grad_accum = 1;
    o.batch_size = setup_min_replica_rows(o, given) * setup_replicas(o, s);
  }
  FANOUT_CHECK(o.batch_size % o.grad_accum == 0, "--batch-size ", o.batch_size,
               " is not a multiple of --grad-accum ", o.grad_accum);
  s.micro_rows = o.batch_size / o.grad_accum;  // train_data_load holds out whole batches
  prepare_data(o, s);
  prepare_run_dir(o, s);
  s.o = o;
  // Under --batch-size auto a resumed position is mapped onto the batch it finds.
  setup_batch(s, o.batch_size, o.grad_accum, given, o.batch_size_auto);
  return s;
}

}  // namespace fanout::train
