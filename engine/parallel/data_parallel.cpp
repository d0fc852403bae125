// DataParallel's construction, its step's entry points (forward_backward,
// reduce_gradients, evaluate) and its byte and time accounting. The pieces live
// beside it: data_parallel_apply.cpp (scatter, one task per replica, gather,
// failure recovery), data_parallel_replicate.cpp (weights to the replicas),
// data_parallel_shards.cpp (zero1-3 shards and the optimizer's half of a step).
#include "engine/parallel/data_parallel.h"

#include <algorithm>
#include <numeric>

#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel_slot.h"
#include "engine/parallel/grad_buckets.h"
#include "engine/parallel/scatter.h"
#include "engine/parallel/zero/sharded_storage.h"

namespace fanout::parallel {

// --- construction -----------------------------------------------------------

DataParallel::DataParallel(const ReplicaFactory& factory, DataParallelOptions options)
    : options_(std::move(options)) {
  const std::vector<Device>& ids = options_.device_ids;
  FANOUT_CHECK(!ids.empty(), "DataParallel needs at least one device");
  if (!options_.output_device) options_.output_device = ids[0];
  int n = static_cast<int>(ids.size());
  if (!options_.chunk_sizes.empty()) {
    FANOUT_CHECK(static_cast<int>(options_.chunk_sizes.size()) == n, "chunk sizes give ",
                 options_.chunk_sizes.size(), " entries for ", n, " devices");
    for (int64_t c : options_.chunk_sizes) FANOUT_CHECK(c >= 0, "chunk sizes must not be negative");
  }
  distributed::ProcessGroup* group = options_.process_group;
  FANOUT_CHECK(!group || n == 1, "across processes each rank drives one device; ", n,
               " devices in one process of a multi-process ", strategy_name(options_.strategy),
               " run is not supported");
  const Strategy st = options_.strategy;
  const bool unit_sharded = strategy_shards_grads(st);
  // zero3 gathers weights on a fetch stream while the comm stream sums gradients:
  // Gloo runs the two side by side (own tags); one NCCL communicator cannot.
  FANOUT_CHECK(!(group && st == Strategy::zero3 && std::string(group->name()) == "nccl"),
               "zero3 across processes runs over Gloo (CPU devices) only for now: over NCCL its "
               "weight gathers and gradient sums would share one communicator from two streams; "
               "use zero2");
  pool_ = std::make_unique<ThreadPool>(ids);
  for (int i = 0; i < n; ++i) {
    replicas_.push_back(factory(ids[i], i));
    FANOUT_ASSERT(replicas_.back() && replicas_.back()->device() == ids[i], "replica ", i,
                  " is not on ", ids[i].str());
    auto slot = std::make_unique<Slot>();
    slot->comm = std::make_unique<Stream>(ids[i], replica_lane(ids, i, "comm"));
    slot->stats = Tensor::empty({2}, DType::f32, ids[i], MemTag::comm);
    slots_.push_back(std::move(slot));
  }
  int64_t P = primary().num_params();
  for (auto& r : replicas_) FANOUT_ASSERT(r->num_params() == P, "replicas differ in size");
  peers_ = std::make_unique<ReplicaGroup>(ids, group, options_.grad_comm);
  const int shards = peers_->ranks();
  rank0_ = peers_->rank0();
  bounds_ = shard_bounds(P, shards);
  if (unit_sharded) {
    // The store replaces the flat buffers before any is allocated (Note [Lazy
    // flat buffers] in models/llama_model.cpp): gradients (zero2), weights too (zero3).
    ShardedStorage::Options so;
    so.weights = st == Strategy::zero3;
    std::vector<Replica*> reps;
    for (auto& r : replicas_) reps.push_back(r.get());
    so.working = primary().working_dtype();
    unit_shards_ = std::make_unique<UnitShards>(primary().units(), shards);
    store_ = std::make_unique<ShardedStorage>(reps, *unit_shards_, *peers_, so);
    for (int i = 0; i < n; ++i) {
      replicas_[i]->set_unit_store(store_->store(i), so.weights);
      replicas_[i]->set_grad_ready_callback(
          [this, i](int64_t begin, int64_t end) { store_->grads_ready(i, begin, end); });
    }
  }
  if (st != Strategy::zero3) {
    for (auto& r : replicas_) {
      FANOUT_ASSERT(r->params().numel() == P && (unit_sharded || r->grads().numel() == P),
                    "replicas differ in size");
      FANOUT_ASSERT(r->working_params().numel() == P &&
                        r->working_params().dtype() == primary().working_params().dtype(),
                    "replicas differ in their working weights");
    }
  }
  if (options_.overlap && !unit_sharded) {
    buckets_ = std::make_unique<GradBuckets>(P, options_.bucket_mb, n);
    for (int i = 0; i < n; ++i) {
      replicas_[i]->set_grad_ready_callback(
          [this, i](int64_t begin, int64_t end) { buckets_->on_ready(i, begin, end); });
    }
  }
  if (options_.graphs) {  // Note [Step graphs]
    FANOUT_CHECK(options_.loss_on == LossOn::replicas,
                 "graphs record each replica's forward and backward together: they need the loss "
                 "on the replicas");
    FANOUT_CHECK(!options_.overlap && !unit_sharded,
                 "graphs record each replica's forward and backward: they cannot hand gradients "
                 "over during backward (overlap, zero2, zero3)");
  }
  if (options_.loss_on == LossOn::output) {
    Device out = *options_.output_device;
    output_stream_ = std::make_unique<Stream>(out, out.str() + " output");
    output_stats_ = Tensor::empty({2}, DType::f32, out, MemTag::comm);
  }
}

const char* DataParallel::collectives_name() const {
  return peers_->local_name();
}

DataParallel::~DataParallel() {
  for (auto& r : replicas_) r->set_grad_ready_callback(nullptr);
}

std::vector<int64_t> DataParallel::split(int64_t rows) const {
  FANOUT_CHECK(rows >= 0, "a batch cannot have ", rows, " rows");
  int n = size();
  if (!options_.chunk_sizes.empty()) {
    int64_t sum =
        std::accumulate(options_.chunk_sizes.begin(), options_.chunk_sizes.end(), int64_t{0});
    FANOUT_CHECK(sum == rows, "the per-device chunk sizes add up to ", sum,
                 " rows but the batch has ", rows);
    return options_.chunk_sizes;
  }
  return even_split(rows, n);
}

AllocatorStats DataParallel::memory(int replica) const {
  return allocator_for(replicas_[replica]->device()).stats();
}

void DataParallel::zero_grad() {
  for (auto& r : replicas_) r->zero_grads();
  if (store_) store_->zero_grads();
}

// --- the step ---------------------------------------------------------------

LossStats DataParallel::forward_backward(const HostBatch& batch, int32_t ignore_index,
                                         double normalizer, bool last) {
  std::vector<int64_t> rows = split(batch.B);
  FANOUT_CHECK(!(options_.strategy == Strategy::zero3 && options_.process_group && batch.B == 0),
               "zero3 across processes: this rank got no rows, but every rank must gather the "
               "weights with the others");
  try {
    replicate();
    bool bucketed = buckets_ && last;
    std::vector<bool> active;
    std::vector<Stream*> comm;
    for (int r = 0; r < size(); ++r)
      active.push_back(rows[r] > 0), comm.push_back(slots_[r]->comm.get());
    // zero2/zero3: every micro-batch's units are reduced into the shards
    if (store_) store_->begin_backward(active, comm);
    if (bucketed) {
      auto grads = grad_buffers();
      buckets_->begin(active, compute_streams(), comm, [this, grads, comm](int64_t b, int64_t e) {
        if (options_.strategy == Strategy::zero1) {
          shard_reduce_scatter(grads, comm, b, e);
        } else {
          // across processes too, in the same bucket order on every rank
          peers_->sum(grads, comm, b, e);
        }
      });
    }
    replica_stopped_ = false;
    LossStats stats = options_.loss_on == LossOn::replicas
                          ? step_on_replicas(batch, rows, ignore_index, normalizer, last)
                          : step_faithful(batch, rows, ignore_index, normalizer, last);
    // A replica that was stopped cannot have returned without another one failing.
    FANOUT_ASSERT(!replica_stopped_, "a replica was stopped but none failed");
    if (bucketed) {
      FANOUT_ASSERT(buckets_->all_launched(), "a gradient bucket was never reduced");
      buckets_->disarm();
      reduced_by_buckets_ = true;
    }
    if (store_) {
      FANOUT_ASSERT(store_->all_reduced(), "a unit's gradients were never reduced");
      store_->end_backward();
      reduced_by_buckets_ = true;
    }
    return stats;
  } catch (...) {
    recover();
    throw;
  }
}

void DataParallel::reduce_gradients() {
  auto t0 = Clock::now();
  TraceScope span("host", "reduce");
  int64_t P = primary().num_params();
  try {
    if (reduced_by_buckets_ || store_) {
      for (auto& s : slots_) s->comm->synchronize();
    } else {
      auto streams = compute_streams();
      if (options_.strategy == Strategy::zero1) {
        shard_reduce_scatter(grad_buffers(), streams, 0, P);
      } else {
        peers_->sum(grad_buffers(), streams, 0, P);
      }
      for (Stream* s : streams) s->synchronize();
    }
  } catch (...) {
    recover();
    throw;
  }
  reduced_by_buckets_ = false;
  times_.reduce += seconds_since(t0);
}

LossStats DataParallel::evaluate(const HostBatch& batch, int32_t ignore_index) {
  std::vector<int64_t> rows = split(batch.B);
  auto [active, row0] = scatter_layout(rows);
  try {
    replicate();
    pool_->run_on(active, [&](int r) {
      Slot& slot = *slots_[r];
      Replica& rep = *replicas_[r];
      upload(r, batch, row0[r], rows[r], true);
      rep.forward_loss(slot.inputs.view(0, {rows[r], batch.T}),
                       slot.targets.view(0, {rows[r], batch.T}), slot.stats, ignore_index);
      std::vector<float> st = tensor_to_vector<float>(rep.compute_stream(), slot.stats);
      slot.loss = {st[0], static_cast<int64_t>(st[1])};
    });
  } catch (...) {
    recover();
    throw;
  }
  LossStats total;
  for (int r : active)
    total.loss_sum += slots_[r]->loss.loss_sum, total.count += slots_[r]->loss.count;
  return total;
}

// --- accounting -------------------------------------------------------------

int64_t DataParallel::total_bytes() const {
  // Across processes zero3's weight gathers are among the bytes sent.
  int64_t b = peers_->bytes_moved();
  if (!peers_->across_processes() && store_) b += store_->weight_bytes();
  return b;
}

void DataParallel::reset_times() {
  times_ = PhaseTimes{};
  bytes_base_ = total_bytes();
  replicate_bytes_ = 0;
  weight_base_ = store_ ? store_->weight_bytes() : 0;
}

CommBytes DataParallel::comm_bytes() const {
  int64_t replicate = replicate_bytes_ + (store_ ? store_->weight_bytes() - weight_base_ : 0);
  return {replicate, total_bytes() - bytes_base_ - replicate};
}

}  // namespace fanout::parallel
