// `fanout train`: every flag of the training job (names are a contract, see
// apps/train/train_options.h). With no flags: the tiny preset on every available
// device, on the embedded default corpus.

#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <string>

#include "apps/data/held_out.h"
#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "apps/presentation/run_curves.h"
#include "apps/train/device_memory.h"
#include "apps/train/trainer.h"
#include "engine/core/check.h"

namespace fanout::app {

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a Llama model with data parallelism");
  auto o = std::make_shared<train::TrainOptions>();
  auto opts = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  // Text: given means non-empty ('--data ""' must not quietly mean "the default").
  auto add = [&](const std::string& name, std::string& member, const std::string& help) {
    CLI::Option* opt = cmd->add_option("--" + name, member, help)->capture_default_str();
    opt->check(CLI::Validator(
        [](std::string& text) {
          return text.empty() ? std::string("an empty value is not allowed") : std::string();
        },
        "TEXT"));
    opts->emplace_back(name, opt);
  };
  // Numbers: range-checked text (cli_flags.h); train_prepare checks how they combine.
  auto num = [&](const std::string& name, auto& member, auto lo, auto hi, const std::string& help) {
    using T = std::remove_reference_t<decltype(member)>;
    opts->emplace_back(name, add_number<T>(cmd, "--" + name, member, help, lo, hi));
  };
  constexpr int64_t kMaxCount = train::kMaxCount;
  auto flag = [&](const std::string& name, bool& member, const std::string& help) {
    opts->emplace_back(name, cmd->add_flag("--" + name, member, help));
  };
  // model
  add("preset", o->preset, "Model preset: tiny, small or seed");
  add("config", o->config, "An HF Llama config.json instead of a preset");
  add("init", o->init, "Start from the weights of this checkpoint directory");
  // data
  add("data", o->data,
      "llm.c .bin token file, JSON Lines (.jsonl, each line's \"text\" a document) or UTF-8 "
      "text (default: the embedded corpus)");
  add("val-data", o->val_data,
      "Held-out data for --eval-every (default: --data's last --val-split of tokens)");
  num("val-split", o->val_split, 0.0, 0.5,
      "Share of --data held out when no --val-data is given, at most " +
          std::to_string(data::kHeldOutMaxTokens) + " tokens (0: none)");
  add("tokenizer", o->tokenizer,
      "A tokenizer.json (HF's format), or byte, for text data and samples (default: the one "
      "fanout prepare left beside --data's token file, else bytes; a resumed run uses its "
      "checkpoint's)");
  add("packing", o->packing, "on: llm.c windows; off: one document per row, padded");
  opts->emplace_back("shuffle", cmd->add_flag("--shuffle,!--no-shuffle", o->shuffle,
                                              "Visit the windows of each epoch in random order"));
  // devices
  add("devices", o->devices, "Devices (default: every GPU, else one CPU device per core)");
  add("output-device", o->output_device, "Where logits are gathered (default: the first device)");
  // A size, not text: its own check refuses "" too.
  CLI::Option* device_memory =
      cmd->add_option("--device-memory", o->device_memory, train::kDeviceMemoryHelp);
  device_memory->type_name("SIZE")->check(CLI::Validator(
      [](std::string& text) { return train::byte_size_problem(text, "--device-memory"); }, ""));
  opts->emplace_back("device-memory", device_memory);
  add("strategy", o->strategy,
      "dp, zero1, zero2, zero3 (sharded; across processes under fanout launch) or ddp");
  add("loss-on", o->loss_on, "output (faithful nn.DataParallel) or replicas");
  // --no-overlap turns it off; ddp overlaps unless told (as PyTorch DDP always does).
  opts->emplace_back("overlap",
                     cmd->add_flag("--overlap,!--no-overlap", o->overlap,
                                   "Reduce gradient buckets while backward runs (the default "
                                   "under --strategy ddp; --no-overlap turns it off)"));
  num("bucket-mb", o->bucket_mb, 0.0, train::kMaxBucketMb,
      "Gradient bucket size for --overlap (fractions allowed)");
  // batch
  num("batch-size", o->batch_size, int64_t{1}, kMaxCount, "Global rows per step");
  add("micro-batch-sizes", o->micro_batch_sizes, "Rows per device in each micro-batch, e.g. 2,6");
  num("seq-len", o->seq_len, int64_t{0}, kMaxCount, "Tokens per row (0: the preset's)");
  num("grad-accum", o->grad_accum, int64_t{1}, kMaxCount, "Micro-batches per step");
  // optimisation
  num("steps", o->steps, int64_t{1}, kMaxCount, "Total optimizer steps of the run");
  num("lr", o->lr, 0.0, 1e6, "Peak learning rate");
  num("min-lr", o->min_lr, 0.0, 1e6, "Final learning rate of the cosine schedule");
  num("warmup", o->warmup, int64_t{0}, kMaxCount, "Linear warmup steps");
  add("schedule", o->schedule, "cosine or constant");
  num("weight-decay", o->weight_decay, 0.0, 1e6, "AdamW weight decay (tensors with >= 2 dims)");
  num("beta1", o->beta1, 0.0, 1.0, "AdamW beta1");
  num("beta2", o->beta2, 0.0, 1.0, "AdamW beta2");
  num("eps", o->eps, 0.0, 1.0, "AdamW epsilon");
  num("clip", o->clip, 0.0, 1e9, "Global gradient-norm clip (0: off)");
  add("precision", o->precision,
      "fp32, or bf16 mixed precision (fp32 master weights, optimizer and gradients; bf16 "
      "GEMMs and activations). Default fp32 on every device");
  add("attention", o->attention,
      "The attention kernel on CUDA devices: auto (cuDNN's fused attention in bf16 where it "
      "loads, else the exact kernel), exact, or cudnn (bf16 only)");
  add("grad-comm", o->grad_comm,
      "fp32 or bf16: the dtype gradients are summed across devices in (bf16 halves the bytes)");
  num("seed", o->seed, uint64_t{0}, std::numeric_limits<uint64_t>::max(),
      "Initialisation and shuffling seed");
  // run
  add("out", o->out, "Run directory (default: runs/<timestamp>)");
  num("save-every", o->save_every, int64_t{0}, kMaxCount,
      "Checkpoint every N steps (0: only the final one)");
  num("eval-every", o->eval_every, int64_t{0}, kMaxCount,
      "Held-out loss every N steps (0: only at the end)");
  // --eval-batches: the older name of --val-batches (Note [Validation settings]).
  opts->emplace_back("val-batches",
                     add_number<int64_t>(cmd, "--val-batches,--eval-batches", o->val_batches,
                                         "Held-out batches per evaluation (0: the whole "
                                         "held-out set; --eval-batches is the older name)",
                                         0, kMaxCount));
  num("keep-last", o->keep_last, int64_t{0}, kMaxCount,
      "Keep only the newest N step checkpoints (0: keep all; final/ and best/ always stay)");
  flag("save-best", o->save_best,
       "Keep the checkpoint with the best held-out loss as best/ (needs --eval-every)");
  num("early-stop", o->early_stop, int64_t{0}, kMaxCount,
      "Stop after N evaluations without a better held-out loss (0: never)");
  add("resume", o->resume,
      "Continue from a checkpoint directory; 'last': the newest in --out; 'auto': the newest "
      "in --out if there is one, else start fresh (for fanout launch --max-restarts)");
  add("trace", o->trace, "Write a Chrome/Perfetto trace of the run");
  flag("json", o->json, "Print a JSON summary as the last line");
  num("timeout", o->timeout, 0.0, 1e6, "ddp: seconds before a silent rank is declared dead");
  return [cmd, o, opts]() -> int {
    if (!cmd->parsed()) return -1;
    std::set<std::string> given;
    for (const auto& [name, opt] : *opts)
      if (opt->count() > 0) given.insert(name);
    // Rank 0's run directory gets curves.svg however the run ended (done, early
    // stop, Ctrl-C, a NaN loss): a picture that fails is a warning, never the run's result.
    std::string run_dir;
    auto draw = [&] {
      // Nothing logged (stopped before the first step): no picture of nothing.
      std::error_code ec;
      const auto logged = std::filesystem::file_size(run_dir + "/metrics.jsonl", ec);
      if (run_dir.empty() || ec || logged == 0) return;
      try {
        std::string path = presentation::run_curves_write(run_dir);
        if (!o->json) std::printf("curves written to %s\n", path.c_str());
      } catch (const Error& e) {
        std::fprintf(stderr, "fanout: warning: no curves.svg: %s\n", e.what());
      }
    };
    int rc = 0;
    try {
      rc = train::train_run(*o, given, &run_dir);
    } catch (const Error&) {
      draw();
      throw;
    }
    draw();
    return rc;
  };
}

}  // namespace fanout::app
