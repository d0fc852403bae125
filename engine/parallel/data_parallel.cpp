#include "engine/parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/grad_buckets.h"
#include "engine/parallel/unit_store.h"

namespace fanout::parallel {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The replicas that got rows, and each replica's first row in the batch.
std::pair<std::vector<int>, std::vector<int64_t>> layout_rows(const std::vector<int64_t>& rows) {
  std::vector<int> active;
  std::vector<int64_t> row0(rows.size(), 0);
  int64_t at = 0;
  for (size_t r = 0; r < rows.size(); at += rows[r], ++r) {
    row0[r] = at;
    if (rows[r] > 0) active.push_back(static_cast<int>(r));
  }
  return {active, row0};
}
}  // namespace

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::dp:
      return "dp";
    case Strategy::zero1:
      return "zero1";
    case Strategy::zero2:
      return "zero2";
    case Strategy::zero3:
      return "zero3";
  }
  return "?";
}

std::string replica_lane(const std::vector<Device>& devices, int i, const std::string& what) {
  int same = static_cast<int>(std::count(devices.begin(), devices.end(), devices[i]));
  std::string name = devices[i].str();
  if (same > 1) name += "#" + std::to_string(i);
  return name + " " + what;
}

// Per-replica device buffers and timings.
struct DataParallel::Slot {
  std::unique_ptr<Stream> comm;
  Tensor inputs, targets, stats;  // capacity-sized
  int64_t capacity = 0;           // tokens
  Tensor logits;                  // faithful dp: this replica's logits of the step
  double scatter_s = 0, forward_s = 0, backward_s = 0;
  LossStats loss;
};

// --- construction -----------------------------------------------------------

DataParallel::DataParallel(const ReplicaFactory& factory, DataParallelOptions options,
                           LossFunctions loss)
    : options_(std::move(options)), loss_(std::move(loss)) {
  const std::vector<Device>& ids = options_.device_ids;
  FANOUT_CHECK(!ids.empty(), "DataParallel needs at least one device");
  if (!options_.output_device) options_.output_device = ids[0];
  int n = static_cast<int>(ids.size());
  if (!options_.chunk_sizes.empty()) {
    FANOUT_CHECK(static_cast<int>(options_.chunk_sizes.size()) == n, "chunk sizes give ",
                 options_.chunk_sizes.size(), " entries for ", n, " devices");
    for (int64_t c : options_.chunk_sizes) FANOUT_CHECK(c >= 0, "chunk sizes must not be negative");
  }
  FANOUT_CHECK(options_.loss_on == LossOn::replicas || (loss_.forward && loss_.backward),
               "faithful dp (--loss-on output) needs the loss functions");
  ProcessGroup* group = options_.process_group;
  FANOUT_CHECK(!group || n == 1, "across processes each rank drives one device; ", n,
               " devices in one process of a multi-process ", strategy_name(options_.strategy),
               " run is not supported");
  const Strategy st = options_.strategy;
  const bool unit_sharded = st == Strategy::zero2 || st == Strategy::zero3;
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
  collectives_ = make_collectives(ids);
  collectives_->set_sum_dtype(options_.grad_comm);
  if (group) group->set_sum_dtype(options_.grad_comm);
  const int shards = group ? group->world() : n;
  rank0_ = group ? group->rank() : 0;
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
    store_ = std::make_unique<ShardedStorage>(reps, *unit_shards_, rank0_, collectives_.get(),
                                              group, so);
    for (int i = 0; i < n; ++i) replicas_[i]->set_unit_store(store_->store(i), so.weights);
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
  if (options_.loss_on == LossOn::output) {
    Device out = *options_.output_device;
    output_stream_ = std::make_unique<Stream>(out, out.str() + " output");
    output_stats_ = Tensor::empty({2}, DType::f32, out, MemTag::comm);
  }
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
  // 10 rows over 4 devices -> 3, 3, 2, 2; 2 rows over 4 -> 1, 1, 0, 0.
  std::vector<int64_t> out(n, rows / n);
  for (int64_t i = 0; i < rows % n; ++i) ++out[i];
  return out;
}

std::vector<Stream*> DataParallel::compute_streams() {
  std::vector<Stream*> s;
  for (auto& r : replicas_) s.push_back(&r->compute_stream());
  return s;
}

std::vector<Tensor> DataParallel::grad_buffers() {
  std::vector<Tensor> g;
  for (auto& r : replicas_) g.push_back(r->grads());
  return g;
}

AllocatorStats DataParallel::memory(int replica) const {
  return allocator_for(replicas_[replica]->device()).stats();
}

// --- step pieces ------------------------------------------------------------

void DataParallel::params_changed() {
  FANOUT_CHECK(options_.strategy != Strategy::zero3,
               "zero3 holds no whole copy of the weights: load them with params_from_host");
  sync_ = Sync::master;
}

void DataParallel::params_from_host(const float* values) {
  if (options_.strategy != Strategy::zero3) {
    tensor_upload(primary().compute_stream(), primary().params(), values);
    primary().compute_stream().synchronize();
    params_changed();
    return;
  }
  for (const Shard& sh : shards())
    tensor_upload(replicas_[sh.replica]->compute_stream(), shard_params(sh), values + sh.begin);
  for (int i = 0; i < size(); ++i) store_->master_to_working(i);
  for (Stream* s : compute_streams()) s->synchronize();
  sync_ = Sync::none;
}

void DataParallel::params_to_host(float* values) {
  if (options_.strategy == Strategy::zero3) {
    std::vector<Tensor> masters;
    for (const Shard& sh : shards()) masters.push_back(shard_params(sh));
    shards_to_host(masters, values);
    return;
  }
  gather_master();
  tensor_to_host(primary().compute_stream(), primary().params(), values);
}

void DataParallel::shards_to_host(const std::vector<Tensor>& per_shard, float* out) {
  std::vector<Shard> sh = shards();
  FANOUT_ASSERT(per_shard.size() == sh.size(), "one tensor per shard");
  ProcessGroup* group = options_.process_group;
  if (!group || !sharded()) {
    for (size_t k = 0; k < sh.size(); ++k) {
      if (sh[k].end <= sh[k].begin) continue;
      Stream& s = replicas_[sh[k].replica]->compute_stream();
      tensor_to_host(s, per_shard[k].view(0, {sh[k].end - sh[k].begin}), out + sh[k].begin);
    }
    return;
  }
  // Across processes: this rank's shards into a whole buffer, then all-gathered.
  Replica& rep = primary();
  Stream& s = rep.compute_stream();
  int64_t P = bounds_.back();
  Tensor whole = Tensor::empty({std::max<int64_t>(P, 1)}, DType::f32, rep.device(), MemTag::comm);
  for (size_t k = 0; k < sh.size(); ++k) {
    int64_t n = sh[k].end - sh[k].begin;
    if (n > 0) tensor_copy(s, whole.view(sh[k].begin, {n}), per_shard[k].view(0, {n}));
  }
  shard_all_gather({whole}, {&s});
  tensor_to_host(s, whole.view(0, {P}), out);
}

void DataParallel::shard_all_gather(const std::vector<Tensor>& bufs,
                                    const std::vector<Stream*>& streams) {
  auto gather = [&](const std::vector<int64_t>& bounds, int64_t begin, int64_t end) {
    if (options_.process_group) {
      options_.process_group->all_gather(bufs[0], bounds, begin, end, *streams[0]);
    } else {
      collectives_->all_gather(bufs, streams, bounds, begin, end);
    }
  };
  if (!unit_shards_) return gather(bounds_, 0, bounds_.back());
  for (size_t u = 0; u < unit_shards_->units().size(); ++u) {
    const ParamUnit& unit = unit_shards_->units()[u];
    gather(unit_shards_->bounds(static_cast<int>(u)), unit.begin, unit.end);
  }
}

void DataParallel::shard_reduce_scatter(const std::vector<Tensor>& bufs,
                                        const std::vector<Stream*>& streams, int64_t begin,
                                        int64_t end) {
  if (options_.process_group) {
    options_.process_group->reduce_scatter(bufs[0], bounds_, begin, end, *streams[0]);
  } else {
    collectives_->reduce_scatter(bufs, streams, bounds_, begin, end);
  }
}

void DataParallel::replicate() {
  if (options_.strategy == Strategy::zero3) sync_ = Sync::none;  // the shards are the weights
  if (sync_ == Sync::none) return;
  auto t0 = Clock::now();
  int64_t b0 = total_bytes();
  TraceScope span("host", "replicate");
  std::vector<Tensor> bufs;
  auto streams = compute_streams();
  int64_t P = primary().num_params();
  if (sync_ == Sync::working || sync_ == Sync::working_rounded) {
    // After a dp step only the primary's master moved: round once (unless the
    // optimizer did), send the working weights (bf16: half the bytes of the master).
    if (sync_ == Sync::working) primary().params_to_working(0, P);
    for (auto& r : replicas_) bufs.push_back(r->working_params());
    collectives_->broadcast(bufs, streams, 0, 0, P);
  } else {
    // Every replica gets the whole fp32 master (a zero1 shard owner updates its
    // own part of it) and rounds its own working copy.
    for (auto& r : replicas_) bufs.push_back(r->params());
    if (sync_ == Sync::master) {
      collectives_->broadcast(bufs, streams, 0, 0, P);
    } else {
      shard_all_gather(bufs, streams);
    }
    for (auto& r : replicas_) r->params_to_working(0, P);
  }
  for (Stream* s : streams) s->synchronize();
  sync_ = Sync::none;
  replicate_bytes_ += total_bytes() - b0;
  times_.replicate += seconds_since(t0);
}

void DataParallel::run_guarded(const std::vector<int>& which, const std::function<void(int)>& fn) {
  pool_->run_on(which, [&](int r) {
    try {
      fn(r);
    } catch (const StepAborted&) {
      // Stopped because another replica failed: that failure is the one reported.
      replica_stopped_ = true;
    } catch (...) {
      // zero2/zero3: the others must not wait for this replica's gradients.
      if (store_) store_->abort();
      throw;
    }
  });
}

void DataParallel::zero_grad() {
  for (auto& r : replicas_) r->zero_grads();
  if (store_) store_->zero_grads();
}

void DataParallel::upload(int r, const HostBatch& batch, int64_t row0, int64_t rows, bool targets) {
  Slot& slot = *slots_[r];
  Replica& rep = *replicas_[r];
  int64_t n = rows * batch.T;
  TraceScope span(replica_lane(options_.device_ids, r, "host"), "scatter");
  if (slot.capacity < n) {
    rep.compute_stream().synchronize();
    slot.inputs = Tensor::empty({n}, DType::i32, rep.device(), MemTag::data);
    slot.targets = Tensor::empty({n}, DType::i32, rep.device(), MemTag::data);
    slot.capacity = n;
  }
  tensor_upload(rep.compute_stream(), slot.inputs.view(0, {rows, batch.T}),
                batch.inputs + row0 * batch.T);
  if (targets) {
    tensor_upload(rep.compute_stream(), slot.targets.view(0, {rows, batch.T}),
                  batch.targets + row0 * batch.T);
  }
}

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
          collectives_->reduce(grads, comm, 0, b, e);
          // then across processes, in the same bucket order on every rank
          if (options_.process_group) options_.process_group->all_reduce(grads[0], b, e, *comm[0]);
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

LossStats DataParallel::step_on_replicas(const HostBatch& batch, const std::vector<int64_t>& rows,
                                         int32_t ignore_index, double normalizer, bool /*last*/) {
  auto [active, row0] = layout_rows(rows);
  run_guarded(active, [&](int r) {
    Slot& slot = *slots_[r];
    Replica& rep = *replicas_[r];
    auto t0 = Clock::now();
    upload(r, batch, row0[r], rows[r], true);
    auto t1 = Clock::now();
    slot.scatter_s = std::chrono::duration<double>(t1 - t0).count();
    if (options_.fault_hook) options_.fault_hook(r, "forward");
    Tensor inputs = slot.inputs.view(0, {rows[r], batch.T});
    Tensor targets = slot.targets.view(0, {rows[r], batch.T});
    rep.forward_loss(inputs, targets, slot.stats, ignore_index);
    std::vector<float> st = tensor_to_vector<float>(rep.compute_stream(), slot.stats);
    slot.loss = {st[0], static_cast<int64_t>(st[1])};
    auto t2 = Clock::now();
    slot.forward_s = std::chrono::duration<double>(t2 - t1).count();
    if (options_.fault_hook) options_.fault_hook(r, "backward");
    rep.backward_from_loss(static_cast<float>(normalizer));
    rep.compute_stream().synchronize();
    slot.backward_s = seconds_since(t2);
  });
  LossStats total;
  double scatter = 0, forward = 0, backward = 0;
  for (int r : active) {
    total.loss_sum += slots_[r]->loss.loss_sum;
    total.count += slots_[r]->loss.count;
    scatter = std::max(scatter, slots_[r]->scatter_s);
    forward = std::max(forward, slots_[r]->forward_s);
    backward = std::max(backward, slots_[r]->backward_s);
  }
  times_.scatter += scatter, times_.forward += forward, times_.backward += backward;
  return total;
}

LossStats DataParallel::step_faithful(const HostBatch& batch, const std::vector<int64_t>& rows,
                                      int32_t ignore_index, double normalizer, bool /*last*/) {
  int64_t T = batch.T, V = primary().vocab_size(), B = batch.B;
  auto [active, row0] = layout_rows(rows);
  // scatter + forward to logits on every replica
  pool_->run_on(active, [&](int r) {
    Slot& slot = *slots_[r];
    Replica& rep = *replicas_[r];
    auto t0 = Clock::now();
    upload(r, batch, row0[r], rows[r], false);
    auto t1 = Clock::now();
    slot.scatter_s = std::chrono::duration<double>(t1 - t0).count();
    if (options_.fault_hook) options_.fault_hook(r, "forward");
    slot.logits = rep.forward_logits(slot.inputs.view(0, {rows[r], T}));
    rep.compute_stream().synchronize();
    slot.forward_s = seconds_since(t1);
  });
  double scatter = 0, forward = 0;
  for (int r : active) {
    scatter = std::max(scatter, slots_[r]->scatter_s);
    forward = std::max(forward, slots_[r]->forward_s);
  }
  times_.scatter += scatter, times_.forward += forward;

  // gather the logits on output_device: the (B, T, V) buffer nn.DataParallel builds
  auto t0 = Clock::now();
  Stream& out = *output_stream_;
  Device od = out.device();
  if (!gathered_.defined() || gathered_.numel() < B * T * V) {
    out.synchronize();
    gathered_ = Tensor();
    gathered_ = Tensor::empty({B * T * V}, DType::f32, od, MemTag::comm);
    gathered_targets_ = Tensor::empty({B * T}, DType::i32, od, MemTag::data);
  }
  Tensor logits = gathered_.view(0, {B, T, V});
  {
    StreamSpan span(out, "gather");
    for (int r : active) {
      tensor_copy(out, logits.slice(row0[r], row0[r] + rows[r]), slots_[r]->logits);
    }
  }
  out.synchronize();
  times_.gather += seconds_since(t0);

  // the loss on output_device, then dlogits in place
  t0 = Clock::now();
  Tensor targets = gathered_targets_.view(0, {B, T});
  tensor_upload(out, targets, batch.targets);
  std::vector<float> st;
  {
    StreamSpan span(out, "loss");
    loss_.forward(out, logits, targets, output_stats_, ignore_index);
    st = tensor_to_vector<float>(out, output_stats_);
    loss_.backward(out, logits, targets, ignore_index, static_cast<float>(normalizer));
  }
  out.synchronize();
  times_.loss += seconds_since(t0);

  // scatter dlogits back (into each replica's logits buffer) and run backward
  run_guarded(active, [&](int r) {
    Slot& slot = *slots_[r];
    Replica& rep = *replicas_[r];
    auto t1 = Clock::now();
    if (options_.fault_hook) options_.fault_hook(r, "backward");
    tensor_copy(rep.compute_stream(), slot.logits, logits.slice(row0[r], row0[r] + rows[r]));
    rep.backward_from_logits(slot.logits);
    rep.compute_stream().synchronize();
    slot.backward_s = seconds_since(t1);
  });
  double backward = 0;
  for (int r : active) backward = std::max(backward, slots_[r]->backward_s);
  times_.backward += backward;
  return {st[0], static_cast<int64_t>(st[1])};
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
        collectives_->reduce(grad_buffers(), streams, 0, 0, P);
        if (options_.process_group) {
          options_.process_group->all_reduce(primary().grads(), 0, P, *streams[0]);
        }
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

std::vector<DataParallel::Shard> DataParallel::shards() const {
  if (options_.strategy == Strategy::dp) return {{0, 0, bounds_.back()}};
  std::vector<Shard> out;
  for (int r = 0; r < size(); ++r) {
    if (!unit_shards_) {
      out.push_back({r, bounds_[rank0_ + r], bounds_[rank0_ + r + 1]});
      continue;
    }
    for (size_t u = 0; u < unit_shards_->units().size(); ++u) {
      const std::vector<int64_t>& b = unit_shards_->bounds(static_cast<int>(u));
      int64_t lo = b[rank0_ + r], hi = b[rank0_ + r + 1];
      if (hi > lo)
        out.push_back({r, lo, hi, unit_shards_->offset(static_cast<int>(u), rank0_ + r)});
    }
  }
  return out;
}

Tensor DataParallel::shard_params(const Shard& sh) {
  int64_t n = sh.end - sh.begin;
  if (options_.strategy == Strategy::zero3) return store_->master(sh.replica).view(sh.local, {n});
  return replicas_[sh.replica]->params().view(sh.begin, {n});
}

Tensor DataParallel::shard_working(const Shard& sh) {
  if (options_.strategy == Strategy::zero3) return Tensor();
  Replica& r = *replicas_[sh.replica];
  Tensor w = r.working_params();
  if (w.raw() == r.params().raw()) return Tensor();
  return w.view(sh.begin, {sh.end - sh.begin});
}

Tensor DataParallel::shard_grads(const Shard& sh) {
  int64_t n = sh.end - sh.begin;
  if (store_) return store_->grads(sh.replica).view(sh.local, {n});
  return replicas_[sh.replica]->grads().view(sh.begin, {n});
}

void DataParallel::run_on_shards(const std::function<void(const Shard&, Replica&)>& fn) {
  auto t0 = Clock::now();
  std::vector<Shard> sh = shards();
  std::vector<int> which;
  for (const Shard& s : sh)
    if (which.empty() || which.back() != s.replica) which.push_back(s.replica);
  pool_->run_on(which, [&](int r) {
    for (const Shard& s : sh)
      if (s.replica == r) fn(s, *replicas_[r]);
    replicas_[r]->compute_stream().synchronize();
  });
  times_.optimizer += seconds_since(t0);
}

void DataParallel::finish_step(bool working_written) {
  if (options_.strategy == Strategy::dp) {
    sync_ = working_written ? Sync::working_rounded : Sync::working;
    return;
  }
  auto t0 = Clock::now();
  if (options_.strategy == Strategy::zero3) {
    // Each owner rounds its master shard; forward gathers units from there.
    for (int r = 0; r < size(); ++r) store_->master_to_working(r);
    for (Stream* s : compute_streams()) s->synchronize();
    times_.replicate += seconds_since(t0);
    return;
  }
  TraceScope span("host", "all-gather params");
  // Each shard owner rounds its updated shard; the working weights are gathered.
  std::vector<Tensor> working;
  if (!working_written)
    for (const Shard& sh : shards()) replicas_[sh.replica]->params_to_working(sh.begin, sh.end);
  for (auto& r : replicas_) working.push_back(r->working_params());
  gather_shards(working);
  times_.replicate += seconds_since(t0);
}

void DataParallel::gather_master() {
  if (options_.strategy == Strategy::dp || options_.strategy == Strategy::zero3) return;
  if (primary().working_params().raw() == primary().params().raw()) return;
  std::vector<Tensor> params;
  for (auto& r : replicas_) params.push_back(r->params());
  gather_shards(params);
}

void DataParallel::gather_shards(const std::vector<Tensor>& bufs) {
  int64_t b0 = total_bytes();
  auto streams = compute_streams();
  shard_all_gather(bufs, streams);
  for (Stream* s : streams) s->synchronize();
  replicate_bytes_ += total_bytes() - b0;
}

int64_t DataParallel::total_bytes() const {
  int64_t b = collectives_->bytes_moved();
  if (options_.process_group) {
    b += options_.process_group->bytes_sent();  // zero3's gathers included
  } else if (store_) {
    b += store_->weight_bytes();
  }
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

LossStats DataParallel::evaluate(const HostBatch& batch, int32_t ignore_index) {
  std::vector<int64_t> rows = split(batch.B);
  auto [active, row0] = layout_rows(rows);
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

void DataParallel::recover() {
  if (buckets_) buckets_->disarm();
  auto drain = [](Stream& s) {
    try {
      s.synchronize();
    } catch (...) {
    }
  };
  for (auto& r : replicas_) drain(r->compute_stream());
  for (auto& s : slots_) drain(*s->comm);
  if (output_stream_) drain(*output_stream_);
  if (store_) store_->reset();
  reduced_by_buckets_ = false;
  // Replicas are re-synchronised: from the primary, or (zero1, zero2) from each
  // shard's owner; zero3's shards are the weights, untouched by forward and backward.
  if (options_.strategy == Strategy::zero3) {
    sync_ = Sync::none;
  } else if (sync_ != Sync::master) {
    sync_ = options_.strategy == Strategy::dp ? Sync::master : Sync::shards;
  }
}

}  // namespace fanout::parallel
