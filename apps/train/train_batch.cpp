#include "apps/train/train_batch.h"

#include <algorithm>
#include <sstream>

#include "apps/data/data_loader.h"
#include "apps/train/eval_history.h"
#include "apps/train/memory_check.h"
#include "apps/train/train_pipeline.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "models/llama_model.h"

namespace fanout::train {

namespace {

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    FANOUT_CHECK(used > 0 && used == item.size() && v >= 0, "--micro-batch-sizes: '", item,
                 "' is not a row count");
    out.push_back(v);
  }
  return out;
}

// The rows each device takes: zero3's ranks need one each, --micro-batch-sizes
// must add up to the micro-batch.
void check_shares(const TrainOptions& o, Setup& s) {
  // zero3's ranks gather every unit's weights together: each must run the model.
  FANOUT_CHECK(!(s.strategy.strategy == parallel::Strategy::zero3 && s.ddp.enabled &&
                 s.micro_rows < s.ddp.world),
               "--strategy zero3 across ", s.ddp.world, " processes needs at least ", s.ddp.world,
               " rows per micro-batch (one per rank), got ", s.micro_rows,
               " (--batch-size / --grad-accum)");
  FANOUT_CHECK(!(s.ddp.enabled && !o.micro_batch_sizes.empty()),
               "--micro-batch-sizes splits rows over the devices of one process; under ddp each "
               "rank takes its rows of every batch");
  s.chunk_sizes.clear();
  if (!o.micro_batch_sizes.empty()) {
    s.chunk_sizes = parse_sizes(o.micro_batch_sizes);
    FANOUT_CHECK(s.chunk_sizes.size() == s.devices.size(), "--micro-batch-sizes gives ",
                 s.chunk_sizes.size(), " sizes for ", s.devices.size(), " devices");
    int64_t sum = 0;
    for (int64_t c : s.chunk_sizes) sum = size_add("--micro-batch-sizes", {sum, c});
    FANOUT_CHECK(sum == s.micro_rows, "--micro-batch-sizes add up to ", sum,
                 " rows but each micro-batch has ", s.micro_rows, " (--batch-size / --grad-accum)");
  }
}

// What a step takes on each device at the least, against this machine's memory.
void check_memory(const TrainOptions& o, const Setup& s) {
  int64_t n = static_cast<int64_t>(s.devices.size());
  int64_t share = memory_largest_share(s.micro_rows, n);
  if (!s.chunk_sizes.empty()) share = *std::max_element(s.chunk_sizes.begin(), s.chunk_sizes.end());
  std::vector<Device> holders = s.devices;
  if (!s.cut.empty()) {
    // A pipeline replica's stages hold one model between them, and at the least
    // one micro-batch's activations: counted as one device per replica.
    const int64_t K = static_cast<int64_t>(s.cut.size()) - 1;
    n /= K;
    holders.clear();
    for (int64_t d = 0; d < n; ++d) holders.push_back(s.devices[d * K]);
    share = (memory_largest_share(s.micro_rows, n) + s.micro_batches - 1) / s.micro_batches;
  }
  MemoryAsk ask{s.micro_rows, share, o.seq_len, s.loss_on == parallel::LossOn::output, true};
  ask.sharded_grads = parallel::strategy_shards_grads(s.strategy.strategy);
  ask.sharded_weights = s.strategy.strategy == parallel::Strategy::zero3;
  ask.shards = s.ddp.enabled ? s.ddp.world : n;
  memory_check_fits(s.config, holders, ask);
}

}  // namespace

data::DataLoader setup_train_loader(const Setup& s, int64_t rows) {
  const TrainOptions& o = s.o;
  return data::DataLoader(s.train_data, rows > 0 ? rows : s.micro_rows, o.seq_len,
                          o.packing == "on", o.shuffle, o.seed, models::kIgnoreIndex);
}

int64_t setup_replicas(const TrainOptions& o, const Setup& s) {
  if (s.ddp.enabled) return s.ddp.world;
  const int64_t n = static_cast<int64_t>(s.devices.size());
  return std::max<int64_t>(1, n / std::max<int64_t>(1, o.pp * o.tp));
}

int64_t setup_min_replica_rows(const TrainOptions& o, const std::set<std::string>& given) {
  return o.pp > 1 && given.count("micro-batches") ? o.micro_batches : 1;
}

int64_t setup_data_rows(const Setup& s) {
  int64_t rows = setup_train_loader(s, 1).batches_per_epoch();
  if (s.has_val) {
    const data::DataLoader val(s.val_data, 1, s.o.seq_len, s.o.packing == "on", false, 0,
                               models::kIgnoreIndex);
    rows = std::min(rows, val.batches_per_epoch());
  }
  return rows;
}

void setup_batch(Setup& s, int64_t batch_size, int64_t grad_accum,
                 const std::set<std::string>& given, bool trial) {
  TrainOptions& o = s.o;
  o.batch_size = batch_size;
  o.grad_accum = grad_accum;
  FANOUT_CHECK(o.batch_size % o.grad_accum == 0, "--batch-size ", o.batch_size,
               " is not a multiple of --grad-accum ", o.grad_accum);
  s.micro_rows = o.batch_size / o.grad_accum;
  // Every token count the run derives: tokens per step and over the whole run.
  size_mul("--batch-size x --seq-len x --steps tokens", {o.batch_size, o.seq_len, o.steps});
  check_shares(o, s);
  // The pipeline's own line is said again for the batch it now has.
  std::erase_if(s.notes, [](const std::string& n) { return n.rfind("pipeline: ", 0) == 0; });
  prepare_pipeline(o, s, given);
  check_memory(o, s);
  // Constructing loaders checks that the data holds at least one batch.
  data::DataLoader train_loader = setup_train_loader(s);
  if (s.resume && !trial) {
    // The position was saved in batches of the checkpoint's geometry; it maps onto
    // this run's only where it falls on a batch boundary (data_loader.h).
    s.resume_data =
        train_loader.state_from(s.resume->state.data, s.saved_rows_per_batch, s.saved_seq_len);
    train_loader.set_state(s.resume_data);  // the saved position must fit
  }
  if (s.has_val) held_out_loader(s);
}

}  // namespace fanout::train
