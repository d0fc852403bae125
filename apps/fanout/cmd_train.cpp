// `fanout train`: every flag of the training job (names are a contract, see
// apps/train/train_options.h). With no flags: the tiny preset on every available
// device, on the embedded default corpus.

#include <memory>
#include <set>
#include <string>

#include "apps/fanout/commands.h"
#include "apps/train/trainer.h"

namespace fanout::app {

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a Llama model with data parallelism");
  auto o = std::make_shared<train::TrainOptions>();
  auto opts = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  auto add = [&](const std::string& name, auto& member, const std::string& help) {
    CLI::Option* opt = cmd->add_option("--" + name, member, help)->capture_default_str();
    opts->emplace_back(name, opt);
  };
  auto flag = [&](const std::string& name, bool& member, const std::string& help) {
    opts->emplace_back(name, cmd->add_flag("--" + name, member, help));
  };
  // model
  add("preset", o->preset, "Model preset: tiny, small or seed");
  add("config", o->config, "An HF Llama config.json instead of a preset");
  add("init", o->init, "Start from the weights of this checkpoint directory");
  // data
  add("data", o->data, "llm.c .bin token file or UTF-8 text (default: the embedded corpus)");
  add("val-data", o->val_data, "Held-out data for --eval-every");
  add("packing", o->packing, "on: llm.c windows; off: one document per row, padded");
  opts->emplace_back("shuffle", cmd->add_flag("--shuffle,!--no-shuffle", o->shuffle,
                                              "Visit the windows of each epoch in random order"));
  // devices
  add("devices", o->devices, "Devices (default: every GPU, else one CPU device per core)");
  add("output-device", o->output_device, "Where logits are gathered (default: the first device)");
  add("strategy", o->strategy, "dp, zero1 or ddp");
  add("loss-on", o->loss_on, "output (faithful nn.DataParallel) or replicas");
  flag("overlap", o->overlap, "Reduce gradient buckets while backward runs");
  add("bucket-mb", o->bucket_mb, "Gradient bucket size for --overlap (fractions allowed)");
  // batch
  add("batch-size", o->batch_size, "Global rows per step");
  add("micro-batch-sizes", o->micro_batch_sizes, "Rows per device in each micro-batch, e.g. 2,6");
  add("seq-len", o->seq_len, "Tokens per row (0: the preset's)");
  add("grad-accum", o->grad_accum, "Micro-batches per step");
  // optimisation
  add("steps", o->steps, "Total optimizer steps of the run");
  add("lr", o->lr, "Peak learning rate");
  add("min-lr", o->min_lr, "Final learning rate of the cosine schedule");
  add("warmup", o->warmup, "Linear warmup steps");
  add("schedule", o->schedule, "cosine or constant");
  add("weight-decay", o->weight_decay, "AdamW weight decay (tensors with >= 2 dims)");
  add("beta1", o->beta1, "AdamW beta1");
  add("beta2", o->beta2, "AdamW beta2");
  add("eps", o->eps, "AdamW epsilon");
  add("clip", o->clip, "Global gradient-norm clip (0: off)");
  add("precision", o->precision, "fp32 or bf16 (default: fp32 on CPU, bf16 on CUDA)");
  add("seed", o->seed, "Initialisation and shuffling seed");
  // run
  add("out", o->out, "Run directory (default: runs/<timestamp>)");
  add("save-every", o->save_every, "Checkpoint every N steps (0: only the final one)");
  add("eval-every", o->eval_every, "Held-out loss every N steps (0: only at the end)");
  add("resume", o->resume, "Continue from a checkpoint directory, or 'last' in --out");
  add("trace", o->trace, "Write a Chrome/Perfetto trace of the run");
  flag("json", o->json, "Print a JSON summary as the last line");
  add("timeout", o->timeout, "ddp: seconds before a silent rank is declared dead");
  return [cmd, o, opts]() -> int {
    if (!cmd->parsed()) return -1;
    std::set<std::string> given;
    for (const auto& [name, opt] : *opts)
      if (opt->count() > 0) given.insert(name);
    return train::train_run(*o, given);
  };
}

}  // namespace fanout::app
