// Embedding the engine: a Llama model wrapped in fanout::parallel::DataParallel
// on two CPU devices through the C++ API, trained for a few AdamW steps on a
// short text. The same calls `fanout train` makes, with nothing hidden.
//
//   build/apps/examples/fanout_dp_example
//
// It takes no arguments: --help prints what it does, anything else is refused.

#include <cstdio>
#include <memory>
#include <string>

#include "apps/data/tokenizer.h"
#include "apps/train/training.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_model.h"

namespace {

constexpr const char* kUsage =
    "usage: fanout_dp_example\n"
    "  Trains a two-layer Llama wrapped in fanout::parallel::DataParallel on cpu:0 and\n"
    "  cpu:1 for 30 AdamW steps through the C++ API; exits 0 when the loss fell.\n"
    "  It takes no arguments.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace fanout;
  if (argc > 1) {
    const std::string arg = argv[1];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr,
                 "fanout_dp_example: error: unexpected argument '%s': it takes none (see --help)\n",
                 arg.c_str());
    return 2;
  }
  // 1. The model: any LlamaConfig; here the tiny preset with two layers.
  models::LlamaConfig config = models::llama_preset("tiny");
  config.num_hidden_layers = 2;

  // 2. The run: one replica per device, built once under the DataParallel engine.
  //    The primary (devices[0]) holds the weights that count; the engine
  //    broadcasts them to the others. AdamW steps on whatever shard each device
  //    owns after the reduction, and the engine then brings the replicas up to date.
  train::TrainingOptions options;
  options.config = config;
  options.devices = {cpu_device(0), cpu_device(1)};
  options.loss_on = parallel::LossOn::replicas;  // only loss scalars leave the replicas
  options.adam.lr = 3e-3f;
  train::InitialWeights weights;
  weights.seed = 42;
  train::Training training(options, weights);
  parallel::DataParallel& dp = training.engine();

  // 3. Data: 8 rows of 32 bytes from a repeating sentence, targets shifted by one.
  std::string text;
  while (text.size() < 8 * 33) text += "the quick brown fox jumps over the lazy dog. ";
  std::vector<int32_t> ids = data::byte_encode(text);
  int64_t B = 8, T = 32;
  std::vector<int32_t> inputs, targets;
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      inputs.push_back(ids[r * T + t]);
      targets.push_back(ids[r * T + t + 1]);
    }
  }
  parallel::HostBatch batch{B, T, inputs.data(), targets.data()};

  // 4. The step: scatter + forward + backward, reduce, optimizer.
  double first = 0, last = 0;
  for (int step = 1; step <= 30; ++step) {
    train::Training::StepResult r = training.step(batch, B * T, step, options.adam.lr, 1.0);
    const double norm = r.grad_norm;
    last = r.loss.loss_sum / r.loss.count;
    if (step == 1) first = last;
    if (step % 10 == 0 || step == 1) {
      std::printf("step %2d  loss %.4f  grad norm %.3f  rows per device %lld,%lld\n", step, last,
                  norm, static_cast<long long>(dp.split(B)[0]),
                  static_cast<long long>(dp.split(B)[1]));
    }
  }
  std::printf("loss %.4f -> %.4f on %s\n", first, last, "cpu:0,cpu:1");
  return last < first ? 0 : 1;
}
