#pragma once
// A training run's inputs, resolved and validated before anything is written:
// the model config (preset, --config, --init or the resumed checkpoint), devices,
// data, batch geometry, the ddp environment and the run directory.

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "apps/data/token_file.h"
#include "apps/train/checkpoint.h"
#include "apps/train/ddp_env.h"
#include "apps/train/train_options.h"
#include "engine/core/device.h"
#include "engine/parallel/pipeline/schedule.h"
#include "engine/parallel/strategy.h"
#include "models/llama_config.h"

namespace fanout::train {

// Everything a run needs, resolved and validated before any file is written.
struct Setup {
  TrainOptions o;
  // o.strategy and o.loss_on, parsed (engine/parallel/strategy.h).
  parallel::StrategyFlag strategy;
  parallel::LossOn loss_on = parallel::LossOn::replicas;
  DdpEnv ddp;  // a world of one unless --strategy ddp
  models::LlamaConfig config;
  std::vector<Device> devices;
  std::optional<Device> output_device;
  std::vector<int64_t> chunk_sizes;
  int64_t micro_rows = 0;
  // --pp: units per stage (stages + 1 bounds; empty without --pp), the schedule
  // and the micro-batches each replica streams per step.
  std::vector<int> cut;
  parallel::PipeSchedule pipe_schedule = parallel::PipeSchedule::one_f_one_b;
  int micro_batches = 0;
  // The run's tokenizer: --tokenizer, else the resumed (or --init) checkpoint's, else
  // the one `fanout prepare` left beside the token files, else the byte tokenizer.
  // Text data is encoded with it, samples decoded, and each checkpoint carries it as
  // tokenizer.json. `tokenizer_from` names where it came from ("" for bytes by
  // default); `tokenizer_beside` is set when it was taken from beside the data.
  std::shared_ptr<const data::TextTokenizer> tokenizer;
  std::string tokenizer_from;
  bool tokenizer_beside = false;
  data::TokenData train_data, val_data;
  bool has_val = false, embedded = false;
  int64_t held_out = 0;  // tokens of --data held out as val_data (--val-split), 0: none
  double unigram = 0;
  std::optional<Checkpoint> resume;
  std::string resume_dir;
  data::LoaderState resume_data;  // the checkpoint's data position in this run's batches
  // The checkpoint's own settings (before flags given again override them).
  int64_t saved_steps = 0, saved_rows_per_batch = 0, saved_seq_len = 0;
  std::vector<std::string> notes;  // one-line remarks to print at the start
  std::vector<float> init_params;
};

// Throws fanout::Error for the first bad input; writes nothing.
Setup train_prepare(TrainOptions options, const std::set<std::string>& given);

}  // namespace fanout::train
