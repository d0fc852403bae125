// `fanout eval`: the mean loss of a checkpoint over a data file, with llm.c's
// no-shuffle windows (B*T+1 tokens advancing by B*T), split over --devices. A
// checkpoint with NaN or Inf weights is refused by the reader, naming the tensor. A
// text file is encoded with the checkpoint's tokenizer.json; a token file `fanout
// prepare` made with another tokenizer is refused.

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/data/data_loader.h"
#include "apps/data/text_tokenizer.h"
#include "apps/data/token_file.h"
#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "apps/train/checkpoint.h"
#include "apps/train/device_memory.h"
#include "apps/train/train_options.h"
#include "apps/train/training.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "engine/core/file_io.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_checkpoint.h"
#include "models/llama_model.h"

namespace fanout::app {

namespace {
struct EvalArgs {
  std::string checkpoint, data, devices = "cpu:0";
  int64_t batch_size = 4, seq_len = 64, max_batches = 0;
  bool json = false;
  std::string precision = "fp32";
  std::string logits;         // "": none; else the first batch's logits as a .npy file
  std::string device_memory;  // "": no cap
};

// A NumPy .npy (format 1.0) of little-endian f32 values of `shape`: what
// numpy.load reads, so a script can compare fanout's logits with another model's.
std::string npy_f32(const std::vector<float>& values, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple
  // of 64 bytes, ending in a newline.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return out;
}

// The logits of `batch` from one model on `device` loaded from the checkpoint, as
// fanout eval computes them (the same working dtype), to --logits.
void write_logits(const EvalArgs& a, const models::LlamaConfig& config, Device device,
                  DType working, const data::Batch& batch) {
  models::LlamaModel m(config, device, "", working);
  models::llama_load_weights(m, a.checkpoint);
  Tensor inputs =
      tensor_from_vector(m.compute_stream(), batch.inputs, {batch.B, batch.T}, DType::i32, device);
  Tensor logits = m.forward_logits(inputs);
  std::vector<float> host = tensor_to_vector<float>(m.compute_stream(), logits);
  file_write_atomic(a.logits, npy_f32(host, {batch.B, batch.T, config.vocab_size}), "--logits");
}

int run_eval(const EvalArgs& a) {
  // The flags' ranges are checked by add_number; their product here.
  size_mul("--batch-size x --seq-len", {a.batch_size, a.seq_len});
  FANOUT_CHECK(!a.data.empty(), "--data: an empty string is not a file name");
  if (!a.logits.empty()) {
    file_check_output(a.logits, "--logits");
    std::error_code ec;
    FANOUT_CHECK(!std::filesystem::equivalent(a.logits, a.data, ec), "--logits names the --data ",
                 "file ", a.data, "; give the logits a file of their own");
  }
  std::vector<Device> devices = devices_parse(a.devices);
  devices_check_available(devices);
  if (!a.device_memory.empty())
    train::apply_device_memory(train::parse_byte_size(a.device_memory, "--device-memory"), devices);
  const DType working = train::precision_dtype(a.precision);
  models::LlamaConfig config = models::llama_load_config(a.checkpoint);
  FANOUT_CHECK(a.seq_len <= config.max_position_embeddings, "--seq-len ", a.seq_len,
               " exceeds the checkpoint's max_position_embeddings (",
               config.max_position_embeddings, ")");
  // Text is encoded with the checkpoint's tokenizer.json (bytes for checkpoints without one).
  const auto tokenizer = train::checkpoint_tokenizer(a.checkpoint);
  // `fanout prepare` leaves the tokenizer it encoded with beside its token files: ids
  // made by another tokenizer than the checkpoint's mean other text, and their loss
  // would be noise. Token files with none beside them (llm.c's) are read as before.
  if (const std::string beside = data::token_file_tokenizer_path(a.data); !beside.empty()) {
    const auto prepared = data::tokenizer_load(beside);
    FANOUT_CHECK(prepared->to_json() == tokenizer->to_json(), "--data ", a.data,
                 " was prepared with ", beside, " (", prepared->describe(),
                 "), not the tokenizer checkpoint ", a.checkpoint, " was trained with (",
                 tokenizer->describe(),
                 "): evaluate on data prepared with the checkpoint's tokenizer");
  }
  data::TokenData data = data::token_file_load(a.data, "--data", *tokenizer);
  data::token_data_check_vocab(data, config.vocab_size);
  data::DataLoader loader(data, a.batch_size, a.seq_len, true, false, 0, models::kIgnoreIndex);

  train::TrainingOptions options;
  options.config = config;
  options.devices = devices;
  options.loss_on = parallel::LossOn::replicas;
  options.working = working;
  train::InitialWeights weights;  // onto the primary, broadcast to the others
  weights.load = [&](models::LlamaModel& primary) {
    models::llama_load_weights(primary, a.checkpoint);
  };
  train::Training training(options, weights);
  parallel::DataParallel& dp = training.engine();
  int64_t batches = loader.batches_per_epoch();
  if (a.max_batches > 0) batches = std::min(batches, a.max_batches);
  double loss_sum = 0;
  int64_t tokens = 0;
  std::optional<data::Batch> first;
  for (int64_t i = 0; i < batches; ++i) {
    data::Batch b = loader.next();
    if (i == 0) first = b;
    parallel::LossStats st =
        dp.evaluate({b.B, b.T, b.inputs.data(), b.targets.data()}, models::kIgnoreIndex);
    loss_sum += st.loss_sum;
    tokens += st.count;
  }
  double loss = loss_sum / static_cast<double>(tokens);
  // A NaN is not a result: the weights (or what the config makes of them) overflow.
  FANOUT_CHECK(std::isfinite(loss), a.checkpoint, ": the loss over ", a.data, " is ", loss,
               " (not a finite number): the checkpoint's weights overflow on this data");
  std::printf(
      "eval: loss %.6f (perplexity %.3f) over %lld tokens in %lld batches of %lld x %lld "
      "on %s, %s\n",
      loss, std::exp(loss), static_cast<long long>(tokens), static_cast<long long>(batches),
      static_cast<long long>(a.batch_size), static_cast<long long>(a.seq_len),
      devices_str(devices).c_str(), a.precision.c_str());
  if (!a.logits.empty()) {
    FANOUT_CHECK(first.has_value(), "--logits: the data holds no batch");
    write_logits(a, config, devices[0], working, *first);
    std::printf("logits of the first batch (%lld x %lld x %lld, f32) written to %s\n",
                static_cast<long long>(first->B), static_cast<long long>(first->T),
                static_cast<long long>(config.vocab_size), a.logits.c_str());
  }
  if (a.json) {
    nlohmann::json j = {
        {"loss", loss}, {"tokens", tokens}, {"batches", batches}, {"perplexity", std::exp(loss)}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}
}  // namespace

Command add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Mean loss of a checkpoint over a data file");
  auto a = std::make_shared<EvalArgs>();
  cmd->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint directory (config.json + model.safetensors, or HF shards)")
      ->required();
  cmd->add_option("--data", a->data,
                  "llm.c .bin token file, JSON Lines (.jsonl, each line's \"text\" a "
                  "document) or UTF-8 text (text encoded with the checkpoint's tokenizer.json, "
                  "else as bytes)")
      ->required();
  add_number(cmd, "--batch-size", a->batch_size, "Rows per batch", int64_t{1}, train::kMaxCount);
  add_number(cmd, "--seq-len", a->seq_len, "Tokens per row", int64_t{1}, train::kMaxCount);
  cmd->add_option("--devices", a->devices, "Devices, e.g. cpu:0,cpu:1 or auto")
      ->capture_default_str();
  cmd->add_option("--device-memory", a->device_memory, train::kDeviceMemoryHelp)
      ->type_name("SIZE")
      ->check(CLI::Validator(
          [](std::string& text) { return train::byte_size_problem(text, "--device-memory"); }, ""));
  add_number(cmd, "--max-batches", a->max_batches, "Stop after N batches (0: the whole file)",
             int64_t{0}, train::kMaxCount);
  cmd->add_option("--precision", a->precision,
                  "fp32, or bf16 (the forward in mixed precision, as training runs it)")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print a JSON object as the last line");
  cmd->add_option("--logits", a->logits,
                  "Also write the first batch's logits (B x T x vocab, f32) to this .npy file, "
                  "from one model on the first device (for comparing with another "
                  "implementation)");
  return [cmd, a]() -> int { return cmd->parsed() ? run_eval(*a) : -1; };
}

}  // namespace fanout::app
