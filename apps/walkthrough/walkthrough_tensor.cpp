#include "apps/walkthrough/walkthrough_tensor.h"

#include <algorithm>
#include <cmath>

#include "apps/data/data_loader.h"
#include "apps/train/training.h"
#include "apps/walkthrough/walkthrough_narrator.h"
#include "apps/walkthrough/walkthrough_prose.h"
#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/grid.h"
#include "models/llama_tensor.h"

namespace fanout::walkthrough::walk {

namespace {

// Rank t's share of one layer and of the vocabulary, in words.
std::string holds(const models::LlamaConfig& c, int T, int t) {
  const models::LlamaConfig part = models::tensor_shard_config(c, T);
  const int64_t H = part.num_attention_heads, KV = part.num_key_value_heads;
  const int64_t I = part.intermediate_size, V = part.vocab_size;
  const int64_t v1 = std::min(c.vocab_size, (t + 1) * V);
  auto range = [](const char* one, const char* many, int64_t a, int64_t b) {
    return a == b
               ? strf("%s %lld", one, static_cast<long long>(a))
               : strf("%s %lld-%lld", many, static_cast<long long>(a), static_cast<long long>(b));
  };
  return range("query head", "query heads", t * H, (t + 1) * H - 1) + " and " +
         range("key-value head", "key-value heads", t * KV, (t + 1) * KV - 1) +
         " (q/k/v rows, o_proj's columns), " +
         range("MLP unit", "MLP units", t * I, (t + 1) * I - 1) +
         " (gate/up rows, down's columns), " +
         range("vocabulary row", "vocabulary rows", std::min(c.vocab_size, t * V), v1 - 1) +
         (c.tie_word_embeddings ? " of the embedding (tied to the lm_head)"
                                : " of the embedding and of the lm_head") +
         ", both norms whole";
}

}  // namespace

WalkthroughTensor walkthrough_tensor(const WalkthroughOptions& o, const data::TokenData& data,
                                     double dp_loss, int index, std::ostream& out) {
  const int T = 2;
  std::vector<Device> devices(o.devices.begin(),
                              o.devices.begin() + std::min<size_t>(o.devices.size(), T));
  if (devices.size() == 1) devices.push_back(devices[0]);
  WalkthroughTensor r;
  r.dp_loss = dp_loss;
  Prose p(out, o.color, o.width);
  out << "\n";
  p.title(strf("%d. tensor parallelism: every weight matrix split (--tp %d)", index, T));
  try {
    models::check_tensor_parallel(o.config, T);
  } catch (const Error& e) {
    r.refused = e.what();
    p.more("This model cannot be split over two devices: " + r.refused + ".");
    return r;
  }
  r.ranks = T;
  std::vector<Device> distinct;
  for (const Device& d : devices)
    if (std::find(distinct.begin(), distinct.end(), d) == distinct.end()) distinct.push_back(d);
  std::vector<AllocatorStats> before;
  for (const Device& d : distinct) {
    before.push_back(allocator_for(d).stats());
    allocator_for(d).reset_peak();
  }
  int64_t tokens = 0;
  {
    train::TrainingOptions options;
    options.config = o.config;
    options.devices = devices;
    options.tensor = T;
    options.micro_batches = 1;
    options.cut = {0, static_cast<int>(o.config.num_hidden_layers) + 2};
    train::Training training(options, train::InitialWeights{});
    data::DataLoader loader(data, o.batch_size, o.seq_len, true, false, 0, models::kIgnoreIndex);
    data::Batch b = loader.next();
    tokens = b.B * b.T;
    parallel::HostBatch hb{b.B, b.T, b.inputs.data(), b.targets.data()};
    const int64_t moved = training.pipeline().bytes_moved();
    Trace& trace = Trace::global();
    const bool was = trace.enabled();
    trace.set_enabled(true);
    r.last.t0_us = trace.now_us();
    const train::Training::StepResult done =
        training.step(hb, static_cast<double>(b.counted()), 1, options.adam.lr, 1.0);
    r.last.t1_us = trace.now_us();
    r.last.spans = spans_between(r.last.t0_us, r.last.t1_us);
    r.loss = done.loss.loss_sum / static_cast<double>(done.loss.count);
    r.bytes_moved = training.pipeline().bytes_moved() - moved;
    r.memory = presentation::device_peaks_above(distinct, before);
    r.timed_ms = time_steps(o, training, loader, 2);
    trace.set_enabled(was);
  }
  r.devices = devices;
  for (int t = 0; t < T; ++t) r.holds.push_back(holds(o.config, T, t));
  r.all_reduce_bytes = tokens * o.config.hidden_size * 4;
  r.all_reduces = 4 * static_cast<int>(o.config.num_hidden_layers) + 2;
  const int64_t loss_parts = tokens * 3 * 4;  // max, sum of exponentials, target logit
  r.bytes_expected = r.all_reduces * 2 * (T - 1) * r.all_reduce_bytes + T * (T - 1) * loss_parts;
  p.more(
      strf("Data parallelism and pipelines keep every weight matrix whole. Tensor "
           "parallelism (Megatron-LM's) splits each one: attention by heads, the MLP by its "
           "units, the embedding and the lm_head by vocabulary rows, so each of %d devices "
           "holds about 1/%d of the model and computes 1/%d of every GEMM on the whole batch: "
           "fanout train --devices %s --tp %d",
           T, T, T, devices_str(devices).c_str(), T));
  for (int t = 0; t < T; ++t) p.line(strf("%s holds", devices[t].str().c_str()), r.holds[t]);
  p.line("all-reduce",
         strf("a layer's o_proj and down_proj each leave a partial sum of the (tokens x hidden) "
              "output on every device, added up before the residual stream goes on: %lld bytes "
              "(%lld tokens x %lld x 4) per all-reduce; backward sums the input gradient of q/k/v "
              "and of gate/up the same way: 4 all-reduces per layer and step, %d with the "
              "embedding's and the head's",
              static_cast<long long>(r.all_reduce_bytes), static_cast<long long>(tokens),
              static_cast<long long>(o.config.hidden_size), r.all_reduces));
  p.line("moved",
         strf("%lld bytes crossed between the devices in this step%s: each all-reduce brings "
              "%d buffer%s to one device and sends the sum back, and the loss gathers three "
              "numbers per token from each device (%lld bytes as computed). --sequence-parallel "
              "moves the same bytes as all-gathers and reduce-scatters, and keeps each device's "
              "share of the tokens' residual stream",
              static_cast<long long>(r.bytes_moved),
              devices[0] == devices[1] ? " (none: both ranks share one device)" : "", T - 1,
              T == 2 ? "" : "s", static_cast<long long>(r.bytes_expected)));
  p.split_model_end(r.loss, dp_loss, "the same model, each matrix computed in pieces", r.memory);
  return r;
}

}  // namespace fanout::walkthrough::walk
