#include "apps/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "engine/core/check.h"
#include "engine/core/durable_file.h"
#include "engine/core/file_io.h"
#include "engine/core/json_parse.h"
#include "models/llama_checkpoint.h"
#include "models/llama_layout.h"
#include "models/safetensors.h"

namespace fanout::train {

namespace fs = std::filesystem;
using nlohmann::json;

// Note [Atomic checkpoint directory]
// checkpoint_write(DIR):
//   1. Removes stale siblings DIR.tmp-<pid>-<n> whose writer is gone.
//   2. Writes every file into a fresh DIR.tmp-<pid>-<n>, trainer_state.json last,
//      fsyncs each file and then the directory.
//   3. Puts it in place: a plain rename if DIR does not exist; otherwise an atomic
//      swap (renameat2 RENAME_EXCHANGE), after which the temporary name holds the
//      old checkpoint and is removed. Where the filesystem cannot swap, DIR is first
//      renamed aside to DIR.old-<pid>-<n>; a crash between the two renames leaves
//      that complete old copy, which checkpoint_read and checkpoint_find_last fall
//      back to and the next write removes.
//   4. fsyncs the parent so the renames themselves survive a power cut.
// So DIR is at every moment absent, the old complete checkpoint or the new one.
// Readers never look at DIR.tmp-*, and a directory without trainer_state.json is
// never taken for a checkpoint.
//
// trainer_state.json (version 1):
//   {"version": 1, "step": S, "data": {"epoch": E, "index": I}, "seed": U,
//    "tokens_seen": N, "flags": {...}}
// S, E, I, N are non-negative integers, U an unsigned 64-bit integer, flags an object.
// Optional (absent in older checkpoints and before the first evaluation):
//   "validation": {"best_loss": L, "best_step": B, "evals_since_best": K}, B <= S
//   "val_loss": V   the held-out loss of these weights (best/ always has it)
//   "batch_size_search": {...}   what --batch-size auto found (an object, kept as is)

namespace {

constexpr const char* kOptimizerFormat = "fanout-adamw";
constexpr const char* kTempTag = ".tmp-";
constexpr const char* kAsideTag = ".old-";
constexpr int64_t kStateVersion = 1;
constexpr uint64_t kMaxStateBytes = uint64_t{64} << 20;

// The two AdamW moments as optimizer.safetensors names them.
struct Moment {
  const char* prefix;
  std::vector<float> Checkpoint::*values;
};
const Moment kMoments[] = {{"exp_avg.", &Checkpoint::exp_avg},
                           {"exp_avg_sq.", &Checkpoint::exp_avg_sq}};

std::atomic<uint64_t> temp_counter{0};

// `dir` without a trailing separator, so that siblings can be named after it.
fs::path dir_normal(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty() && p.has_parent_path()) p = p.parent_path();
  return p;
}

fs::path dir_parent(const fs::path& dir) {
  return dir.has_parent_path() ? dir.parent_path() : fs::path(".");
}

// Runs fn; a fanout::Error it throws comes out as "checkpoint <shown>: <message>",
// with the path of `actual` dropped from the front of the message.
template <typename Fn>
auto in_checkpoint(const fs::path& shown, const fs::path& actual, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    const std::string prefix = (actual / "").string();
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    throw Error("checkpoint " + shown.string() + ": " + msg);
  } catch (const fs::filesystem_error& e) {
    throw Error("checkpoint " + shown.string() + ": " + e.what());
  }
}

// --- files --------------------------------------------------------------------

void file_write_synced(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FANOUT_CHECK(fd >= 0, path.string(), ": cannot create: ", std::strerror(errno));
  try {
    fd_write_all(fd, text, path);
    FANOUT_CHECK(::fsync(fd) == 0, path.string(), ": cannot fsync: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  FANOUT_CHECK(::close(fd) == 0, path.string(), ": cannot close: ", std::strerror(errno));
}

void path_rename(const fs::path& from, const fs::path& to) {
  FANOUT_CHECK(std::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from.string(), " to ",
               to.string(), ": ", std::strerror(errno));
}

// Swaps two directory entries atomically; false where the filesystem cannot.
bool path_exchange(const fs::path& a, const fs::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  const int err = errno;
  FANOUT_CHECK(err == EINVAL || err == ENOSYS || err == ENOTSUP, "cannot swap ", a.string(),
               " and ", b.string(), ": ", std::strerror(err));
  return false;
}

// Only a regular file is read (a FIFO would block), up to a size no state file needs.
std::string file_read(const fs::path& path) {
  return file_read_regular(path.string(), kMaxStateBytes);
}

// --- sibling directories --------------------------------------------------------

// Whether `name` is `base` + tag + "<pid>-<n>"; sets pid.
bool sibling_parse(const std::string& name, const std::string& base, const char* tag, long& pid) {
  const std::string prefix = base + tag;
  if (name.size() <= prefix.size() || name.rfind(prefix, 0) != 0) return false;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, pid);
  if (ec != std::errc() || end == first) pid = -1;  // not ours, but still a leftover
  return true;
}

// Another live process may still be writing through its temporary directory.
bool writer_alive(long pid) {
  return pid != static_cast<long>(::getpid()) && process_alive(pid);
}

// Removes DIR<tag>* left by writers that are gone (best effort: readers ignore them).
void siblings_remove(const fs::path& dir, const char* tag) {
  std::error_code ec;
  const std::string base = dir.filename().string();
  std::vector<fs::path> stale;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_parent(dir), ec)) {
    long pid = -1;
    if (sibling_parse(e.path().filename().string(), base, tag, pid) && !writer_alive(pid)) {
      stale.push_back(e.path());
    }
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

bool checkpoint_complete(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(dir / kCheckpointStateFile, ec);
}

// Why the entry `dir` of a run directory is not a complete checkpoint, e.g. "has no
// trainer_state.json"; "" when it is one or is not there at all.
std::string checkpoint_problem(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(dir, ec);
  if (!fs::exists(link)) return "";
  const fs::file_status st = fs::status(dir, ec);
  if (fs::is_symlink(link) && ec) {
    const std::string why =
        ec == std::errc::no_such_file_or_directory ? "which does not exist" : ec.message();
    return "is a link to " + fs::read_symlink(dir, ec).string() + " (" + why + ")";
  }
  if (!fs::is_directory(st)) return "is not a directory";
  const fs::file_status state = fs::status(dir / kCheckpointStateFile, ec);
  if (!fs::exists(state)) return std::string("has no ") + kCheckpointStateFile;
  if (!fs::is_regular_file(state)) {
    return std::string("has a ") + kCheckpointStateFile + " that is not a file";
  }
  return "";
}

// Where the link `entry` leads when that is outside the directory `out`, else "" (not
// a link, or one to a place inside `out`).
std::string link_outside(const fs::path& entry, const fs::path& out) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(entry, ec))) return "";
  const fs::path inside = fs::weakly_canonical(out, ec);
  if (ec) return "";  // then the entry is not reachable either
  const fs::path target = fs::weakly_canonical(entry, ec);
  if (ec) return "";  // a loop: not followed anyway (checkpoint_problem names it)
  const fs::path rel = target.lexically_relative(inside);
  if (rel.empty() || *rel.begin() == "..") return target.string();
  return "";
}

// DIR, or where it is missing, a complete copy renamed aside by an interrupted write.
fs::path dir_resolve(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir, ec))) return dir;
  const std::string base = dir.filename().string();
  for (const fs::directory_entry& e : fs::directory_iterator(dir_parent(dir), ec)) {
    long pid = -1;
    if (sibling_parse(e.path().filename().string(), base, kAsideTag, pid) &&
        checkpoint_complete(e.path())) {
      return e.path();
    }
  }
  return dir;
}

// An existing DIR is replaced only when it holds nothing a user could lose.
void check_replaceable(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (!fs::exists(st)) return;
  FANOUT_CHECK(fs::is_directory(st), "exists and is not a directory");
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    FANOUT_CHECK(checkpoint_file_known(name), "exists and holds '", name,
                 "', which is not a checkpoint file (refusing to replace it)");
  }
  FANOUT_CHECK(!ec, "cannot list the existing directory: ", ec.message());
}

// --- trainer_state.json -----------------------------------------------------------

json state_to_json(const TrainerState& s) {
  json j = json::object();
  j["version"] = kStateVersion;
  j["step"] = s.step;
  j["data"] = {{"epoch", s.data.epoch}, {"index", s.data.index}};
  j["seed"] = s.seed;
  j["tokens_seen"] = s.tokens_seen;
  j["flags"] = s.flags;
  if (s.best_step >= 0) {
    j["validation"] = {{"best_loss", s.best_val_loss},
                       {"best_step", s.best_step},
                       {"evals_since_best", s.evals_since_best}};
  }
  if (std::isfinite(s.val_loss)) j["val_loss"] = s.val_loss;
  if (s.batch_search.is_object()) j["batch_size_search"] = s.batch_search;
  return j;
}

void state_check(const TrainerState& s) {
  FANOUT_CHECK(s.step >= 0, "step is negative (", s.step, ")");
  FANOUT_CHECK(s.data.epoch >= 0 && s.data.index >= 0, "data position (epoch ", s.data.epoch,
               ", index ", s.data.index, ") is negative");
  FANOUT_CHECK(s.tokens_seen >= 0, "tokens_seen is negative (", s.tokens_seen, ")");
  FANOUT_CHECK(s.flags.is_object(), "flags must be a JSON object, got ", s.flags.type_name());
  FANOUT_CHECK(s.best_step < 0 || (s.best_step <= s.step && std::isfinite(s.best_val_loss) &&
                                   s.evals_since_best >= 0),
               "validation history (best step ", s.best_step, ", loss ", s.best_val_loss,
               ", evaluations since ", s.evals_since_best, ") does not fit step ", s.step);
}

const json& state_key(const json& j, const char* key, const std::string& name) {
  FANOUT_CHECK(j.contains(key), kCheckpointStateFile, ": missing key \"", name, "\"");
  return j[key];
}

// A non-negative integer that fits int64.
int64_t state_count(const json& j, const char* key, const std::string& name) {
  const json& v = state_key(j, key, name);
  FANOUT_CHECK(v.is_number_integer(), kCheckpointStateFile, ": \"", name,
               "\" must be an integer, got ",
               v.is_primitive() ? v.dump() : std::string(v.type_name()));
  if (v.is_number_unsigned()) {
    FANOUT_CHECK(v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                 kCheckpointStateFile, ": \"", name, "\" is out of range (", v.dump(), ")");
  }
  const int64_t n = v.get<int64_t>();
  FANOUT_CHECK(n >= 0, kCheckpointStateFile, ": \"", name, "\" is negative (", n, ")");
  return n;
}

TrainerState state_from_text(const std::string& text) {
  const json j = json_parse(text, kCheckpointStateFile);
  FANOUT_CHECK(j.is_object(), kCheckpointStateFile, ": expected a JSON object, got ",
               j.type_name());
  const json& version = state_key(j, "version", "version");
  FANOUT_CHECK(version.is_number_integer() && version.get<int64_t>() == kStateVersion,
               kCheckpointStateFile, ": version ", version.dump(),
               " is not supported (this build reads ", kStateVersion, ")");
  TrainerState s;
  s.step = state_count(j, "step", "step");
  const json& data = state_key(j, "data", "data");
  FANOUT_CHECK(data.is_object(), kCheckpointStateFile, ": \"data\" must be an object, got ",
               data.type_name());
  s.data.epoch = state_count(data, "epoch", "data.epoch");
  s.data.index = state_count(data, "index", "data.index");
  const json& seed = state_key(j, "seed", "seed");
  FANOUT_CHECK(seed.is_number_unsigned(), kCheckpointStateFile,
               ": \"seed\" must be a non-negative integer, got ", seed.dump());
  s.seed = seed.get<uint64_t>();
  s.tokens_seen = state_count(j, "tokens_seen", "tokens_seen");
  s.flags = state_key(j, "flags", "flags");
  FANOUT_CHECK(s.flags.is_object(), kCheckpointStateFile, ": \"flags\" must be an object, got ",
               s.flags.type_name());
  if (j.contains("validation")) {
    const json& v = j["validation"];
    FANOUT_CHECK(v.is_object(), kCheckpointStateFile, ": \"validation\" must be an object, got ",
                 v.type_name());
    const json& loss = state_key(v, "best_loss", "validation.best_loss");
    FANOUT_CHECK(loss.is_number() && std::isfinite(loss.get<double>()), kCheckpointStateFile,
                 ": \"validation.best_loss\" must be a finite number, got ", loss.dump());
    s.best_val_loss = loss.get<double>();
    s.best_step = state_count(v, "best_step", "validation.best_step");
    s.evals_since_best = state_count(v, "evals_since_best", "validation.evals_since_best");
    FANOUT_CHECK(s.best_step <= s.step, kCheckpointStateFile, ": \"validation.best_step\" ",
                 s.best_step, " is past the checkpoint's step ", s.step);
  }
  if (j.contains("val_loss")) {
    const json& v = j["val_loss"];
    FANOUT_CHECK(v.is_number() && std::isfinite(v.get<double>()), kCheckpointStateFile,
                 ": \"val_loss\" must be a finite number, got ", v.dump());
    s.val_loss = v.get<double>();
  }
  if (j.contains("batch_size_search")) {
    s.batch_search = j["batch_size_search"];
    FANOUT_CHECK(s.batch_search.is_object(), kCheckpointStateFile,
                 ": \"batch_size_search\" must be an object, got ", s.batch_search.type_name());
  }
  return s;
}

// --- optimizer.safetensors ------------------------------------------------------

void optimizer_write(const models::LlamaConfig& config, const Checkpoint& ckpt,
                     const fs::path& path) {
  models::LlamaLayout layout(config);
  std::vector<models::SafetensorsTensor> tensors;
  for (const Moment& m : kMoments) {
    const float* data = (ckpt.*m.values).data();
    for (const models::ParamInfo& p : layout.params()) {
      tensors.push_back({m.prefix + p.name, DType::f32, p.shape, data + p.offset});
    }
  }
  models::safetensors_write(path.string(), tensors, {{"format", kOptimizerFormat}});
}

void optimizer_read(const models::LlamaConfig& config, const fs::path& path, Checkpoint& ckpt) {
  const std::string where = path.string();
  models::SafetensorsFile file = models::SafetensorsFile::open(where);
  auto format = file.metadata().find("format");
  const std::string found = format == file.metadata().end() ? "" : format->second;
  FANOUT_CHECK(found == kOptimizerFormat, where,
               ": not a fanout AdamW state (__metadata__ format '", found, "', expected '",
               kOptimizerFormat, "')");
  models::LlamaLayout layout(config);
  std::set<std::string> expected;
  for (const Moment& m : kMoments) {
    for (const models::ParamInfo& p : layout.params()) expected.insert(m.prefix + p.name);
  }
  for (const models::SafetensorsEntry& e : file.entries()) {
    FANOUT_CHECK(expected.count(e.name), where, ": unexpected tensor '", e.name,
                 "' (not part of this config's model)");
  }
  for (const Moment& m : kMoments) {
    std::vector<float>& values = ckpt.*m.values;
    values.assign(static_cast<size_t>(layout.total()), 0.0f);
    for (const models::ParamInfo& p : layout.params()) {
      const std::string name = m.prefix + p.name;
      const models::SafetensorsEntry* e = file.find(name);
      FANOUT_CHECK(e != nullptr, where, ": missing tensor '", name, "'");
      FANOUT_CHECK(e->shape == p.shape, where, ": tensor '", name, "' has shape ",
                   shape_str(e->shape), ", expected ", shape_str(p.shape), " for this config");
      FANOUT_CHECK(e->dtype == "F32", where, ": tensor '", name, "' is ", e->dtype,
                   ", expected F32");
      file.read_f32(name, values.data() + p.offset, p.numel);
    }
    // NaN moments would turn the first step's update into NaN weights; a negative
    // second moment would take a square root of it.
    models::llama_check_finite(config, values, where, m.prefix,
                               m.values == &Checkpoint::exp_avg_sq);
  }
}

// --- writing ------------------------------------------------------------------------

void checkpoint_check(const Checkpoint& ckpt) {
  ckpt.config.validate("config");
  const size_t total = static_cast<size_t>(models::LlamaLayout(ckpt.config).total());
  const std::pair<const char*, const std::vector<float>*> buffers[] = {
      {"params", &ckpt.params}, {"exp_avg", &ckpt.exp_avg}, {"exp_avg_sq", &ckpt.exp_avg_sq}};
  for (const auto& [name, values] : buffers) {
    FANOUT_CHECK(values->size() == total, name, " has ", values->size(),
                 " values, the config needs ", total);
  }
  // Never write (and so never name as good) a checkpoint that could not be resumed.
  models::llama_check_finite(ckpt.config, ckpt.params, "refusing to write it");
  for (const Moment& m : kMoments) {
    models::llama_check_finite(ckpt.config, ckpt.*m.values, "refusing to write it", m.prefix,
                               m.values == &Checkpoint::exp_avg_sq);
  }
  state_check(ckpt.state);
}

// Every file of the checkpoint into the (existing, empty) directory `dir`, synced.
void files_write(const fs::path& dir, const Checkpoint& ckpt) {
  std::string state_text;
  try {
    state_text = state_to_json(ckpt.state).dump(2) + "\n";
  } catch (const json::exception&) {
    detail::throw_error("flags must be valid UTF-8");
  }
  models::llama_config_save(ckpt.config, (dir / kCheckpointConfigFile).string());
  path_sync(dir / kCheckpointConfigFile, false);
  models::llama_write_weights(ckpt.config, ckpt.params, (dir / kCheckpointModelFile).string());
  optimizer_write(ckpt.config, ckpt, dir / kCheckpointOptimizerFile);
  if (!ckpt.tokenizer_json.empty()) {
    file_write_synced(dir / kCheckpointTokenizerFile, ckpt.tokenizer_json);
  }
  // Last: it marks the checkpoint complete.
  file_write_synced(dir / kCheckpointStateFile, state_text);
  path_sync(dir, true);
}

// Puts the finished temporary directory `tmp` in place of `dir` (Note [Atomic checkpoint
// directory], step 3).
void dir_commit(const fs::path& tmp, const fs::path& dir, const std::string& tag) {
  const fs::path parent = dir_parent(dir);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) {
    path_rename(tmp, dir);
    path_sync(parent, true);
  } else if (path_exchange(tmp, dir)) {
    path_sync(parent, true);
    fs::remove_all(tmp, ec);  // now the old checkpoint; a leftover goes with the next write
  } else {
    const fs::path aside = dir.string() + kAsideTag + tag;
    path_rename(dir, aside);
    try {
      path_rename(tmp, dir);
    } catch (...) {
      std::rename(aside.c_str(), dir.c_str());  // best effort: the old one back in place
      throw;
    }
    path_sync(parent, true);
    fs::remove_all(aside, ec);
  }
  siblings_remove(dir, kAsideTag);
}

}  // namespace

// --- public ---------------------------------------------------------------------------

bool checkpoint_file_known(std::string_view name) {
  if (name.size() > 4 && name.ends_with(".tmp")) name.remove_suffix(4);
  for (const char* file : kCheckpointFiles) {
    if (name == file) return true;
  }
  return false;
}

void checkpoint_write(const std::string& dir_arg, const Checkpoint& ckpt) {
  const fs::path dir = dir_normal(dir_arg);
  in_checkpoint(dir, dir, [&] {
    FANOUT_CHECK(!dir.filename().empty() && dir.filename() != "." && dir.filename() != "..",
                 "not a usable directory name");
    checkpoint_check(ckpt);
    check_replaceable(dir);
    std::error_code ec;
    fs::create_directories(dir_parent(dir), ec);
    FANOUT_CHECK(!ec, "cannot create the parent directory: ", ec.message());
    siblings_remove(dir, kTempTag);

    const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(temp_counter++);
    const fs::path tmp = dir.string() + kTempTag + tag;
    fs::remove_all(tmp, ec);
    fs::create_directory(tmp, ec);
    FANOUT_CHECK(!ec, "cannot create ", tmp.string(), ": ", ec.message());
    try {
      files_write(tmp, ckpt);
      dir_commit(tmp, dir, tag);
    } catch (...) {
      std::error_code ignored;
      fs::remove_all(tmp, ignored);
      throw;
    }
  });
}

Checkpoint checkpoint_read(const std::string& dir_arg) {
  const fs::path shown = dir_normal(dir_arg);
  const fs::path dir = dir_resolve(shown);
  return in_checkpoint(shown, dir, [&] {
    std::error_code ec;
    const fs::file_status st = fs::status(dir, ec);
    FANOUT_CHECK(fs::exists(st), "no such directory");
    FANOUT_CHECK(fs::is_directory(st), "not a directory");
    for (const char* file : {kCheckpointStateFile, kCheckpointConfigFile, kCheckpointModelFile,
                             kCheckpointOptimizerFile}) {
      FANOUT_CHECK(fs::exists(fs::status(dir / file, ec)), "missing ", file,
                   " (not a complete checkpoint)");
      file_check_regular((dir / file).string());  // a FIFO or device is refused by name
    }
    Checkpoint ckpt;
    ckpt.state = state_from_text(file_read(dir / kCheckpointStateFile));
    ckpt.config = models::llama_config_load((dir / kCheckpointConfigFile).string());
    // Resuming trains: weights, gradients and both moments must fit, checked before
    // any of them is allocated.
    models::llama_config_check_memory(ckpt.config, kCheckpointConfigFile, true);
    models::llama_read_weights(ckpt.config, (dir / kCheckpointModelFile).string(), ckpt.params);
    optimizer_read(ckpt.config, dir / kCheckpointOptimizerFile, ckpt);
    if (fs::exists(fs::symlink_status(dir / kCheckpointTokenizerFile, ec))) {
      ckpt.tokenizer_json = file_read_regular((dir / kCheckpointTokenizerFile).string());
      // Loaded once here, so a damaged file is named before the run starts.
      data::tokenizer_from_json(ckpt.tokenizer_json, (shown / kCheckpointTokenizerFile).string());
    }
    return ckpt;
  });
}

std::shared_ptr<const data::TextTokenizer> checkpoint_tokenizer(const std::string& dir) {
  const fs::path path = fs::path(dir) / kCheckpointTokenizerFile;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return data::byte_tokenizer();
  return data::tokenizer_load(path.string());
}

std::string checkpoint_step_name(int64_t step) {
  FANOUT_CHECK(step >= 0, "checkpoint step must be non-negative, got ", step);
  char name[32];
  std::snprintf(name, sizeof name, "step-%06lld", static_cast<long long>(step));
  return name;
}

std::string checkpoint_find_last(const std::string& out_dir, std::string* passed_over) {
  const fs::path out = dir_normal(out_dir);
  std::error_code ec;
  FANOUT_CHECK(fs::is_directory(out, ec), "no checkpoint found in ", out.string(),
               " (no such directory)");
  // Names of checkpoints, including those only present as a copy renamed aside.
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    std::string name = e.path().filename().string();
    if (auto pos = name.find(kAsideTag); pos != std::string::npos) name.resize(pos);
    if (name.find(kTempTag) == std::string::npos) names.insert(name);
  }
  std::string best;
  int64_t best_step = -1;
  // The newest entry named like a checkpoint that is none (final, else the highest
  // step), named if nothing else can be taken.
  std::string damaged;
  bool damaged_final = false;
  int64_t damaged_step = -1;  // final: the highest
  for (const std::string& name : names) {
    int64_t step = -1;
    if (name.rfind("step-", 0) == 0 && name.size() > 5) {
      const char* first = name.data() + 5;
      const char* last = name.data() + name.size();
      auto [end, err] = std::from_chars(first, last, step);
      if (err != std::errc() || end != last || *first == '-' || *first == '+') continue;
    } else if (name != "final") {
      continue;
    }
    const fs::path dir = dir_resolve(out / name);
    // A run's checkpoints are its own: a link out of it (to another run, or to files
    // someone else put there) is never followed, and named rather than skipped.
    const std::string outside = link_outside(dir, out);
    FANOUT_CHECK(outside.empty(), dir.string(), " is a link to ", outside, ", outside ",
                 out.string(),
                 ": fanout does not follow links out of a run directory (remove "
                 "the link, or give --resume the checkpoint it leads to)");
    if (!checkpoint_complete(dir)) {
      if (const std::string why = checkpoint_problem(dir); !why.empty() && !damaged_final) {
        damaged = dir.string() + " " + why;
        damaged_final = name == "final";
        damaged_step = damaged_final ? INT64_MAX : step;
      }
      continue;
    }
    if (name == "final") {
      step = in_checkpoint(out / name, dir, [&] {
        return state_from_text(file_read(dir / kCheckpointStateFile)).step;
      });
    }
    if (step > best_step || (step == best_step && name == "final")) {
      best_step = step;
      best = (out / name).string();
    }
  }
  if (passed_over != nullptr) {
    *passed_over = !best.empty() && damaged_step > best_step ? damaged : "";
  }
  if (!damaged.empty()) {
    damaged = ": " + damaged +
              ", so it is not a complete checkpoint (move it away, or give --resume a "
              "checkpoint directory)";
  }
  FANOUT_CHECK(!best.empty(), "no checkpoint found in ", out.string(), damaged);
  return best;
}

}  // namespace fanout::train
