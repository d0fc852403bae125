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

namespace {

using TrainOptionList = std::vector<std::pair<std::string, CLI::Option*>>;

// Adds train's flags, remembering each by name: the names given on the command
// line win over a resumed run's saved settings.
struct TrainFlags {
  CLI::App* cmd;
  std::shared_ptr<TrainOptionList> opts;
  // Text: given means non-empty ('--data ""' must not quietly mean "the default").
  void text(const std::string& name, std::string& member, const std::string& help) {
    CLI::Option* opt = cmd->add_option("--" + name, member, help)->capture_default_str();
    opt->check(CLI::Validator(
        [](std::string& text) {
          return text.empty() ? std::string("an empty value is not allowed") : std::string();
        },
        "TEXT"));
    opts->emplace_back(name, opt);
  }
  // Numbers: range-checked text (cli_flags.h); train_prepare checks how they combine.
  template <typename T, typename L, typename H>
  void number(const std::string& name, T& member, L lo, H hi, const std::string& help) {
    opts->emplace_back(name, add_number<T>(cmd, "--" + name, member, help, lo, hi));
  }
  void flag(const std::string& name, bool& member, const std::string& help) {
    opts->emplace_back(name, cmd->add_flag("--" + name, member, help));
  }
};

constexpr int64_t kMaxCount = train::kMaxCount;

// The model and the data.
void add_model_data_flags(TrainFlags& f, train::TrainOptions& o) {
  // model
  f.text("preset", o.preset, "Model preset: tiny, small or seed");
  f.text("config", o.config, "An HF Llama config.json instead of a preset");
  f.text("init", o.init, "Start from the weights of this checkpoint directory");
  // data
  f.text("data", o.data,
         "llm.c .bin token file, JSON Lines (.jsonl, each line's \"text\" a document) or UTF-8 "
         "text (default: the embedded corpus)");
  f.text("val-data", o.val_data,
         "Held-out data for --eval-every (default: --data's last --val-split of tokens)");
  f.number("val-split", o.val_split, 0.0, 0.5,
           "Share of --data held out when no --val-data is given, at most " +
               std::to_string(data::kHeldOutMaxTokens) + " tokens (0: none)");
  f.text("tokenizer", o.tokenizer,
         "A tokenizer.json (HF's format), or byte, for text data and samples (default: the one "
         "fanout prepare left beside --data's token file, else bytes; a resumed run uses its "
         "checkpoint's)");
  f.text("packing", o.packing, "on: llm.c windows; off: one document per row, padded");
  f.opts->emplace_back("shuffle",
                       f.cmd->add_flag("--shuffle,!--no-shuffle", o.shuffle,
                                       "Visit the windows of each epoch in random order"));
}

// Devices and how they share a step.
void add_device_flags(TrainFlags& f, train::TrainOptions& o) {
  // devices
  f.text("devices", o.devices, "Devices (default: every GPU, else one CPU device per core)");
  f.text("output-device", o.output_device, "Where logits are gathered (default: the first device)");
  // A size, not text: its own check refuses "" too.
  CLI::Option* device_memory =
      f.cmd->add_option("--device-memory", o.device_memory, train::kDeviceMemoryHelp);
  device_memory->type_name("SIZE")->check(CLI::Validator(
      [](std::string& text) { return train::byte_size_problem(text, "--device-memory"); }, ""));
  f.opts->emplace_back("device-memory", device_memory);
  f.text("strategy", o.strategy,
         "dp, zero1, zero2, zero3 (sharded; across processes under fanout launch) or ddp");
  f.text("loss-on", o.loss_on, "output (faithful nn.DataParallel) or replicas");
  // --no-overlap turns it off; ddp overlaps unless told (as PyTorch DDP always does).
  f.opts->emplace_back("overlap",
                       f.cmd->add_flag("--overlap,!--no-overlap", o.overlap,
                                       "Reduce gradient buckets while backward runs (the default "
                                       "under --strategy ddp; --no-overlap turns it off)"));
  f.number("bucket-mb", o.bucket_mb, 0.0, train::kMaxBucketMb,
           "Gradient bucket size for --overlap (fractions allowed)");
  f.opts->emplace_back(
      "pipeline-parallel",
      add_number<int64_t>(f.cmd, "--pipeline-parallel,--pp", o.pp,
                          "Pipeline stages K: the model cut into K stages, --devices listing K x D "
                          "devices (K stages for each of D data-parallel replicas)",
                          1, kMaxCount));
  f.opts->emplace_back(
      "tensor-parallel",
      add_number<int64_t>(f.cmd, "--tensor-parallel,--tp", o.tp,
                          "Tensor-parallel ranks T: each weight matrix split over T devices "
                          "(attention heads, MLP units, the vocabulary); --devices lists D x K x T "
                          "devices, tensor peers next to each other",
                          1, kMaxCount));
  f.flag("sequence-parallel", o.sequence_parallel,
         "With --tp: each tensor rank keeps its share of the tokens' residual stream and norms "
         "(all-gather and reduce-scatter instead of the all-reduces)");
  f.text("pp-schedule", o.pp_schedule,
         "The pipeline schedule: gpipe, 1f1b or zb1 (zero bubble: the backward split into "
         "input and weight halves)");
  f.number("micro-batches", o.micro_batches, int64_t{1}, kMaxCount,
           "Micro-batches each pipeline replica streams per step (default: 2 x --pp, at most "
           "its rows)");
  f.text("balance", o.balance,
         "How --pp cuts the model: params, flops, time (a short profiling run), or decoder "
         "layers per stage, e.g. 3,5 (the embedding joins the first stage, the head the last)");
  f.text("offload", o.offload,
         "optimizer: keep the fp32 master weights and AdamW state in host memory and run the "
         "update on host threads (with --strategy dp, zero1, zero2 or zero3); the devices keep "
         "the working weights and gradients");
  f.flag("recompute", o.recompute,
         "Keep only each layer's input and recompute its forward in backward (less memory, "
         "the same results)");
}

// The batch and the optimisation.
void add_optimisation_flags(TrainFlags& f, train::TrainOptions& o) {
  // batch
  {  // A number, or auto: the rows per step found by trial steps (batch_finder.h).
    CLI::Option* batch = f.cmd->add_option_function<std::string>(
        "--batch-size",
        [&o](const std::string& text) {
          o.batch_size_auto = text == "auto";
          if (!o.batch_size_auto)
            o.batch_size = parse_whole_number(text, 1, kMaxCount, "--batch-size");
        },
        "Global rows per step, or auto: the largest batch that fits the devices, found by a few "
        "trial steps before the run (each device's memory less --batch-size-margin)");
    batch->default_str(std::to_string(o.batch_size))->type_name("NUMBER|auto");
    batch->check(CLI::Validator(
        [](std::string& text) {
          if (text == "auto") return std::string();
          std::string why = number_in<int64_t>(1, kMaxCount)(text);
          if (!why.empty() && why.back() == ')') why.insert(why.size() - 1, " or auto");
          return why;
        },
        ""));
    f.opts->emplace_back("batch-size", batch);
  }
  f.number("global-batch-size", o.global_batch_size, int64_t{1}, kMaxCount,
           "With --batch-size auto: the rows per step, reached by accumulating the largest "
           "batch that fits and divides it");
  f.number("max-batch-size", o.max_batch_size, int64_t{1}, kMaxCount,
           "With --batch-size auto: the most rows per micro-batch to try (default: the rows the "
           "data holds)");
  f.text("batch-size-search", o.batch_size_search,
         "With --batch-size auto: power (double while it fits) or binsearch (double, then "
         "bisect to the largest that fits)");
  f.number("batch-size-margin", o.batch_size_margin, 0.0, 0.9,
           "With --batch-size auto: the share of each device's memory kept free (of "
           "--device-memory, a GPU's memory, or CPU devices' equal shares of this machine's)");
  f.text("micro-batch-sizes", o.micro_batch_sizes, "Rows per device in each micro-batch, e.g. 2,6");
  f.number("seq-len", o.seq_len, int64_t{0}, kMaxCount, "Tokens per row (0: the preset's)");
  f.number("grad-accum", o.grad_accum, int64_t{1}, kMaxCount, "Micro-batches per step");
  // optimisation
  f.number("steps", o.steps, int64_t{1}, kMaxCount, "Total optimizer steps of the run");
  f.number("lr", o.lr, 0.0, 1e6, "Peak learning rate");
  f.number("min-lr", o.min_lr, 0.0, 1e6, "Final learning rate of the cosine schedule");
  f.number("warmup", o.warmup, int64_t{0}, kMaxCount, "Linear warmup steps");
  f.text("schedule", o.schedule, "cosine or constant");
  f.number("weight-decay", o.weight_decay, 0.0, 1e6, "AdamW weight decay (tensors with >= 2 dims)");
  f.number("beta1", o.beta1, 0.0, 1.0, "AdamW beta1");
  f.number("beta2", o.beta2, 0.0, 1.0, "AdamW beta2");
  f.number("eps", o.eps, 0.0, 1.0, "AdamW epsilon");
  f.number("clip", o.clip, 0.0, 1e9, "Global gradient-norm clip (0: off)");
  f.text("precision", o.precision,
         "fp32, or bf16 mixed precision (fp32 master weights, optimizer and gradients; bf16 "
         "GEMMs and activations). Default fp32 on every device");
  f.text("attention", o.attention,
         "The attention kernel on CUDA devices: auto (cuDNN's fused attention in bf16 where it "
         "loads, else the exact kernel), exact, or cudnn (bf16 only)");
  f.text("gemm-algo", o.gemm_algo,
         "heuristic (the default) or timed: how cuBLASLt's algorithm is chosen for each bf16 "
         "GEMM shape on CUDA devices; timed tries its best few once, at first use, and keeps "
         "the fastest (runs may then differ in the last bits)");
  f.text("projections", o.projections,
         "auto (the default: fused on CUDA devices, separate on CPU devices), separate or "
         "fused: q/k/v as one GEMM and gate/up as one; the same values, for comparing speeds");
  f.text("graphs", o.graphs,
         "auto (the default: on for CUDA devices where the run allows it), on or off: record "
         "each device's forward and backward once and replay them (CUDA graphs on CUDA "
         "devices); the same values, fewer launches. On needs --loss-on replicas and dp, ddp "
         "or zero1 without --overlap");
  f.text("grad-comm", o.grad_comm,
         "fp32 or bf16: the dtype gradients are summed across devices in (bf16 halves the bytes)");
  f.number("seed", o.seed, uint64_t{0}, std::numeric_limits<uint64_t>::max(),
           "Initialisation and shuffling seed");
}

// The run: its directory, checkpoints, evaluations and outputs.
void add_run_flags(TrainFlags& f, train::TrainOptions& o) {
  // run
  f.text("out", o.out, "Run directory (default: runs/<timestamp>)");
  f.number("save-every", o.save_every, int64_t{0}, kMaxCount,
           "Checkpoint every N steps (0: only the final one)");
  f.number("eval-every", o.eval_every, int64_t{0}, kMaxCount,
           "Held-out loss every N steps (0: only at the end)");
  // --eval-batches: the older name of --val-batches (Note [Validation settings]).
  f.opts->emplace_back("val-batches",
                       add_number<int64_t>(f.cmd, "--val-batches,--eval-batches", o.val_batches,
                                           "Held-out batches per evaluation (0: the whole "
                                           "held-out set; --eval-batches is the older name)",
                                           0, kMaxCount));
  f.number("keep-last", o.keep_last, int64_t{0}, kMaxCount,
           "Keep only the newest N step checkpoints (0: keep all; final/ and best/ always stay)");
  f.flag("save-best", o.save_best,
         "Keep the checkpoint with the best held-out loss as best/ (needs --eval-every)");
  f.number("early-stop", o.early_stop, int64_t{0}, kMaxCount,
           "Stop after N evaluations without a better held-out loss (0: never)");
  f.text("resume", o.resume,
         "Continue from a checkpoint directory; 'last': the newest in --out; 'auto': the newest "
         "in --out if there is one, else start fresh (for fanout launch --max-restarts)");
  f.text("trace", o.trace, "Write a Chrome/Perfetto trace of the run");
  f.flag("json", o.json, "Print a JSON summary as the last line");
  f.number("timeout", o.timeout, 0.0, 1e6, "ddp: seconds before a silent rank is declared dead");
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a Llama model with data parallelism");
  auto o = std::make_shared<train::TrainOptions>();
  auto opts = std::make_shared<TrainOptionList>();
  TrainFlags flags{cmd, opts};
  add_model_data_flags(flags, *o);
  add_device_flags(flags, *o);
  add_optimisation_flags(flags, *o);
  add_run_flags(flags, *o);
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
