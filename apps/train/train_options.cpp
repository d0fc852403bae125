#include "apps/train/train_options.h"

#include "engine/core/check.h"

namespace fanout::train {

// One list of (flag name, member) pairs serves both directions.
// clang-format off  (clang-format 14 does not settle on a list macro)
#define FANOUT_TRAIN_OPTIONS(X)             \
  X("preset", preset)                       \
  X("config", config)                       \
  X("init", init)                           \
  X("data", data)                           \
  X("val-data", val_data)                   \
  X("packing", packing)                     \
  X("shuffle", shuffle)                     \
  X("output-device", output_device)         \
  X("strategy", strategy)                   \
  X("loss-on", loss_on)                     \
  X("overlap", overlap)                     \
  X("bucket-mb", bucket_mb)                 \
  X("batch-size", batch_size)               \
  X("seq-len", seq_len)                     \
  X("grad-accum", grad_accum)               \
  X("micro-batch-sizes", micro_batch_sizes) \
  X("steps", steps)                         \
  X("warmup", warmup)                       \
  X("lr", lr)                               \
  X("min-lr", min_lr)                       \
  X("weight-decay", weight_decay)           \
  X("beta1", beta1)                         \
  X("beta2", beta2)                         \
  X("eps", eps)                             \
  X("clip", clip)                           \
  X("schedule", schedule)                   \
  X("precision", precision)                 \
  X("seed", seed)                           \
  X("save-every", save_every)               \
  X("eval-every", eval_every)
// clang-format on

nlohmann::json train_options_to_json(const TrainOptions& o) {
  nlohmann::json j = nlohmann::json::object();
#define X(name, member) j[name] = o.member;
  FANOUT_TRAIN_OPTIONS(X)
#undef X
  return j;
}

void train_options_merge(TrainOptions& o, const nlohmann::json& j,
                         const std::set<std::string>& keep) {
  FANOUT_CHECK(j.is_object(), "the saved run settings are not a JSON object");
  try {
#define X(name, member) \
  if (!keep.count(name) && j.contains(name)) j.at(name).get_to(o.member);
    FANOUT_TRAIN_OPTIONS(X)
#undef X
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error(std::string("the saved run settings are damaged: ") + e.what());
  }
}

int64_t preset_seq_len(const std::string& preset) {
  if (preset == "small") return 256;
  if (preset == "seed") return 512;
  return 128;
}

}  // namespace fanout::train
