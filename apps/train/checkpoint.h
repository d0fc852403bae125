#pragma once
// Training checkpoints: one directory holding config.json and model.safetensors
// (a plain HF model directory), optimizer.safetensors (AdamW moments, whole and in
// flat layout order, so a run resumes on any number of devices) and
// trainer_state.json (step, data position, seed, flags). Writes are atomic: a
// crash at any moment leaves the previous complete checkpoint or the new one.

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/data/data_loader.h"
#include "apps/data/text_tokenizer.h"
#include "models/llama_config.h"

namespace fanout::train {

// The files of a checkpoint directory. trainer_state.json, written last, marks a
// checkpoint complete; tokenizer.json is there when the run has a tokenizer.
inline constexpr const char* kCheckpointConfigFile = "config.json";
inline constexpr const char* kCheckpointModelFile = "model.safetensors";
inline constexpr const char* kCheckpointOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kCheckpointTokenizerFile = "tokenizer.json";
inline constexpr const char* kCheckpointStateFile = "trainer_state.json";
inline constexpr const char* kCheckpointFiles[] = {kCheckpointConfigFile, kCheckpointModelFile,
                                                   kCheckpointOptimizerFile,
                                                   kCheckpointTokenizerFile, kCheckpointStateFile};

// Whether `name` is one of kCheckpointFiles, or one of them half-written (NAME.tmp):
// what a checkpoint directory, finished or interrupted, may hold.
bool checkpoint_file_known(std::string_view name);

struct TrainerState {
  int64_t step = 0;        // optimizer steps completed
  data::LoaderState data;  // position of the next training batch
  uint64_t seed = 0;
  int64_t tokens_seen = 0;
  nlohmann::json flags = nlohmann::json::object();  // the run's settings, stored verbatim
  // The held-out history --save-best and --early-stop continue from on resume: the
  // best loss so far and its step (-1: no evaluation yet), evaluations since it
  // last improved, and this step's own held-out loss (NaN: not evaluated at it).
  double best_val_loss = 0;
  int64_t best_step = -1, evals_since_best = 0;
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  // What --batch-size auto found (apps/train/batch_finder.h), kept with the run; null: none.
  nlohmann::json batch_search;
};

struct Checkpoint {
  models::LlamaConfig config;
  std::vector<float> params, exp_avg, exp_avg_sq;  // flat layout order (LlamaLayout), whole
  TrainerState state;
  // The run's tokenizer as HF's tokenizer.json text; "" in checkpoints written
  // before runs carried one (their runs used the byte tokenizer).
  std::string tokenizer_json;
};

// Writes the checkpoint directory `dir` (creating its parent if needed):
//   config.json            HF Llama keys
//   model.safetensors      HF names, F32
//   optimizer.safetensors  "exp_avg.<hf name>" and "exp_avg_sq.<hf name>", F32,
//                          __metadata__ {"format": "fanout-adamw"}
//   tokenizer.json         the run's tokenizer (HF's format; when tokenizer_json is set)
//   trainer_state.json     see checkpoint.cpp for the schema
// See Note [Atomic checkpoint directory] in checkpoint.cpp. An existing `dir` is
// replaced only if it holds nothing but checkpoint files. Errors: "checkpoint <dir>: ...".
void checkpoint_write(const std::string& dir, const Checkpoint& ckpt);

// Reads and validates every file; throws fanout::Error "checkpoint <dir>: <problem>".
Checkpoint checkpoint_read(const std::string& dir);

// The tokenizer of checkpoint directory `dir` (any HF model folder): its
// tokenizer.json, or the byte tokenizer when it has none (checkpoints from before
// tokenizers). A tokenizer.json that does not load is an error naming it.
std::shared_ptr<const data::TextTokenizer> checkpoint_tokenizer(const std::string& dir);

// The directory name for step N: "step-000123".
std::string checkpoint_step_name(int64_t step);

// `--resume last`: the complete checkpoint (one with trainer_state.json) with the
// highest step among OUT_DIR/step-N and OUT_DIR/final (final wins a tie); temporary
// directories are ignored. Throws "no checkpoint found in <out_dir>" if there is none
// (naming the newest entry that looked like one and why it is not, e.g. a final/
// without trainer_state.json), and for an entry that is a link out of OUT_DIR,
// which is never followed. `passed_over` (when given) is set to the newest entry
// newer than the one returned that is no complete checkpoint, with why (e.g.
// "RUN/final has no trainer_state.json"), or "" when there is none: a run resumed
// from an older step should say what it skipped.
std::string checkpoint_find_last(const std::string& out_dir, std::string* passed_over = nullptr);

}  // namespace fanout::train
