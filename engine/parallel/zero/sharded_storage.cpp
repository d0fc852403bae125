#include "engine/parallel/zero/sharded_storage.h"

#include <algorithm>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/core/trace.h"

namespace fanout::parallel {

// Note [Sharded storage]
// ~~~~~~~~~~~~~~~~~~~~~~
// zero3 in one process gathers weights by pulling: replica i's fetch stream
// copies each owner's piece of a unit from the owner's working shard. The shards
// change only in the optimizer step, which every stream has finished before the
// next forward, so a replica needs no other replica's help to gather -- replicas
// never wait for each other's forward, and each unit is fetched once per use by
// each replica, whatever the threads' timing. Across processes (one replica per
// process) the same request is an all-gather, which every rank issues in the same
// order because every rank runs the same model code.
//
// Gradients need every replica: a unit's buffers are reduce-scattered once every
// active replica has queued the unit's backward (GradBuckets, one bucket per
// unit); idle replicas (no rows) contribute zeros. Each owner adds its piece to
// its fp32 shard, so micro-batches accumulate there.
//
// Memory: a gathered unit lives from its fetch until the compute stream has run
// past its release; a gradient buffer until its reduction has run. A replica's
// host thread queues work far ahead of its stream (CPU streams and CUDA alike),
// so without a bound it would allocate every unit before the first one ran:
// `max_units` per replica bounds both kinds, and the host waits for its streams.

struct ShardedStorage::Slot {
  Replica* replica = nullptr;
  std::unique_ptr<Stream> fetch;  // zero3: weight gathers
  Tensor master, working, grads;  // this replica's shard
  std::mutex mu;
  std::condition_variable freed;
  struct Held {
    Tensor buf;
    int refs = 0;
    std::shared_ptr<Event> ready;
  };
  std::map<int, Held> held;              // unit -> gathered weights (under mu)
  std::map<int64_t, Tensor> grad_bufs;   // range begin -> its buffer this backward (under mu)
  int live_weights = 0, live_grads = 0;  // allocated and not yet freed (under mu)
  int held_grads = 0;                    // acquired and not yet released (under mu)
};

class ShardedStorage::View final : public UnitStore {
 public:
  View(ShardedStorage& s, int i) : s_(s), i_(i) {}
  // The model numbers units in its whole layout; a stage's store holds its own.
  Tensor acquire_weights(int unit, int next) override {
    return s_.acquire_weights(i_, unit - first(), next < 0 ? next : next - first());
  }
  void release_weights(int unit) override { s_.release_weights(i_, unit - first()); }
  Tensor acquire_grads(int unit, int64_t begin, int64_t end) override {
    return s_.acquire_grads(i_, unit - first(), begin, end);
  }

 private:
  int first() const { return s_.options_.first_unit; }
  ShardedStorage& s_;
  int i_;
};

UnitShards::UnitShards(std::vector<ParamUnit> units, int ranks)
    : units_(std::move(units)), ranks_(ranks), size_(ranks, 0) {
  FANOUT_ASSERT(ranks > 0, "unit shards over ", ranks, " ranks");
  for (const ParamUnit& u : units_) {
    std::vector<int64_t> b = shard_bounds(u.end - u.begin, ranks);
    for (int64_t& x : b) x += u.begin;
    std::vector<int64_t> off(ranks);
    for (int r = 0; r < ranks; ++r) off[r] = size_[r], size_[r] += b[r + 1] - b[r];
    bounds_.push_back(std::move(b));
    offset_.push_back(std::move(off));
  }
}

std::vector<int64_t> UnitShards::relative_bounds(int u) const {
  std::vector<int64_t> b = bounds_[u];
  for (int64_t& x : b) x -= units_[u].begin;
  return b;
}

ShardedStorage::ShardedStorage(const std::vector<Replica*>& replicas, const UnitShards& shards,
                               ReplicaGroup& peers, Options options)
    : replicas_(replicas),
      shards_(shards),
      units_(shards.units()),
      rank0_(peers.rank0()),
      peers_(peers),
      group_(peers.processes()),
      options_(options) {
  FANOUT_ASSERT(!replicas_.empty(), "sharded storage without replicas");
  FANOUT_ASSERT(group_ == nullptr || replicas_.size() == 1,
                "across processes, sharded storage holds one replica per process");
  // A tied head holds the embedding's unit besides its own.
  FANOUT_ASSERT(options_.max_units >= 2, "sharded storage needs room for 2 units per replica");
  const int n = static_cast<int>(replicas_.size());
  FANOUT_ASSERT(rank0_ + n <= shards_.ranks(), "more replicas than shards");
  FANOUT_ASSERT(group_ != nullptr || shards_.ranks() == n,
                "in one process every rank is a replica");
  // The units may be a pipeline stage's: the gradient ranges inside them.
  std::vector<int64_t> cuts{units_.front().begin};
  for (const ParamUnit& r : replicas_[0]->grad_ranges()) {
    if (r.end <= units_.front().begin || r.begin >= units_.back().end) continue;
    FANOUT_ASSERT(r.begin == cuts.back() && r.end > r.begin, "gradient ranges must tile the units");
    cuts.push_back(r.end);
  }
  FANOUT_ASSERT(cuts.back() == units_.back().end, "gradient ranges must cover the units");
  buckets_ = std::make_unique<GradBuckets>(cuts, n);
  for (int i = 0; i < n; ++i) {
    auto slot = std::make_unique<Slot>();
    Replica& rep = *replicas_[i];
    slot->replica = &rep;
    Device d = rep.device();
    int64_t len = std::max<int64_t>(shards_.size(rank0_ + i), 1);
    slot->grads = Tensor::empty({len}, DType::f32, d, MemTag::grads);
    flat_fill(rep.compute_stream(), slot->grads, 0.0f);
    if (options_.weights) {
      slot->master = Tensor::empty({len}, DType::f32, d, MemTag::params);
      flat_fill(rep.compute_stream(), slot->master, 0.0f);
      slot->working = slot->master;
      if (options_.working != DType::f32) {
        slot->working = Tensor::empty({len}, options_.working, d, MemTag::params);
        flat_round_bf16(rep.compute_stream(), slot->working, slot->master);
      }
      slot->fetch = std::make_unique<Stream>(d, rep.compute_stream().name() + " fetch");
    }
    slots_.push_back(std::move(slot));
    views_.push_back(std::make_unique<View>(*this, i));
  }
  for (int i = 0; i < n; ++i) replicas_[i]->compute_stream().synchronize();
}

ShardedStorage::~ShardedStorage() {
  // Queued frees refer to the slots: let every stream that holds one run dry.
  auto drain = [](Stream* s) {
    try {
      if (s) s->synchronize();
    } catch (...) {
    }
  };
  for (Stream* s : comm_) drain(s);
  for (auto& slot : slots_) drain(&slot->replica->compute_stream()), drain(slot->fetch.get());
}

Tensor ShardedStorage::master(int i) const {
  return slots_[i]->master;
}
Tensor ShardedStorage::working(int i) const {
  return slots_[i]->working;
}
Tensor ShardedStorage::grads(int i) const {
  return slots_[i]->grads;
}

UnitStore* ShardedStorage::store(int i) {
  return views_[i].get();
}

void ShardedStorage::free_after(int i, Stream& stream, Tensor t, int Slot::*count) {
  Slot& slot = *slots_[i];
  auto drop = [&slot, count](Tensor& t) {
    t = Tensor();
    {
      std::lock_guard<std::mutex> lock(slot.mu);
      --(slot.*count);
    }
    slot.freed.notify_all();
  };
  if (!stream.device().is_cpu()) {
    // The CUDA allocator's free waits for the device (Note [CUDA allocation ordering]).
    drop(t);
    return;
  }
  stream.enqueue_marker([t, drop]() mutable { drop(t); });
}

// --- weights (zero3) ----------------------------------------------------------

void ShardedStorage::gather(int i, int unit, std::unique_lock<std::mutex>& lock) {
  Slot& slot = *slots_[i];
  slot.freed.wait(lock, [&] { return aborted_ || slot.live_weights < options_.max_units; });
  if (aborted_) throw StepAborted("stopped: another device failed in this step");
  const ParamUnit& u = units_[unit];
  const int64_t len = u.end - u.begin;
  Device d = slot.replica->device();
  Tensor buf = Tensor::empty({len}, options_.working, d, MemTag::params);
  ++slot.live_weights;
  Stream& fetch = *slot.fetch;
  std::vector<int64_t> ub = shards_.relative_bounds(unit);
  const int64_t esize = static_cast<int64_t>(dtype_size(options_.working));
  {
    StreamSpan span(fetch, "gather weights");
    if (group_ == nullptr) {
      for (size_t q = 0; q < slots_.size(); ++q) {
        const int rank = rank0_ + static_cast<int>(q);
        int64_t lo = ub[rank], hi = ub[rank + 1];
        if (lo >= hi) continue;
        const Slot& owner = *slots_[q];
        tensor_copy(fetch, buf.view(lo, {hi - lo}),
                    owner.working.view(shards_.offset(unit, rank), {hi - lo}));
        if (owner.replica->device() != d) weight_bytes_ += (hi - lo) * esize;
      }
    } else {
      const int r = rank0_, w = shards_.ranks();
      int64_t lo = ub[r], hi = ub[r + 1];
      if (lo < hi)
        tensor_copy(fetch, buf.view(lo, {hi - lo}),
                    slot.working.view(shards_.offset(unit, r), {hi - lo}));
      peers_.all_gather({buf}, {&fetch}, ub, 0, len);
      // What the ring all-gather sends (gloo_group.cpp): every piece but the next rank's.
      int next = (r + 1) % w;
      weight_bytes_ += (len - (ub[next + 1] - ub[next])) * esize;
    }
  }
  auto ready = std::make_shared<Event>();
  ready->record(fetch);
  slot.held[unit] = {buf, 0, ready};
}

Tensor ShardedStorage::acquire_weights(int i, int unit, int next) {
  FANOUT_ASSERT(options_.weights, "acquire_weights without sharded weights");
  Slot& slot = *slots_[i];
  std::unique_lock<std::mutex> lock(slot.mu);
  if (!slot.held.count(unit)) gather(i, unit, lock);
  Slot::Held& h = slot.held[unit];
  ++h.refs;
  h.ready->wait(slot.replica->compute_stream());
  Tensor buf = h.buf;
  // Prefetch: the next unit travels while this one computes.
  if (next >= 0 && !slot.held.count(next)) gather(i, next, lock);
  return buf;
}

void ShardedStorage::release_weights(int i, int unit) {
  Slot& slot = *slots_[i];
  Tensor buf;
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    auto it = slot.held.find(unit);
    if (it == slot.held.end()) return;  // forgotten by reset()
    if (--it->second.refs > 0) return;
    buf = it->second.buf;
    slot.held.erase(it);
  }
  free_after(i, slot.replica->compute_stream(), std::move(buf), &Slot::live_weights);
}

void ShardedStorage::master_to_working(int i) {
  Slot& slot = *slots_[i];
  if (slot.working.raw() == slot.master.raw()) return;
  flat_round_bf16(slot.replica->compute_stream(), slot.working, slot.master);
}

// --- gradients (zero2, zero3) -----------------------------------------------------

void ShardedStorage::zero_grads() {
  for (auto& slot : slots_) flat_fill(slot->replica->compute_stream(), slot->grads, 0.0f);
}

void ShardedStorage::begin_backward(const std::vector<bool>& active,
                                    const std::vector<Stream*>& comm) {
  comm_ = comm;
  active_ = active;
  std::vector<Stream*> compute;
  for (auto& slot : slots_) compute.push_back(&slot->replica->compute_stream());
  buckets_->begin(active, compute, comm,
                  [this](int64_t begin, int64_t end) { reduce(begin, end); });
}

Tensor ShardedStorage::acquire_grads(int i, int unit, int64_t begin, int64_t end) {
  Slot& slot = *slots_[i];
  FANOUT_ASSERT(0 <= unit && unit < static_cast<int>(units_.size()), "unit ", unit,
                " is not in this store");
  FANOUT_ASSERT(units_[unit].begin <= begin && begin < end && end <= units_[unit].end,
                "gradient range [", begin, ", ", end, ") is not inside unit ", unit);
  std::unique_lock<std::mutex> lock(slot.mu);
  // Only what the model holds may exist besides: every released range reduced.
  slot.freed.wait(lock, [&] { return aborted_ || slot.live_grads == slot.held_grads; });
  if (aborted_) throw StepAborted("stopped: another device failed in this step");
  Tensor buf = Tensor::empty({end - begin}, DType::f32, slot.replica->device(), MemTag::grads);
  ++slot.live_grads, ++slot.held_grads;
  flat_fill(slot.replica->compute_stream(), buf, 0.0f);
  slot.grad_bufs[begin] = buf;
  return buf;
}

void ShardedStorage::grads_ready(int i, int64_t begin, int64_t end) {
  {
    Slot& slot = *slots_[i];
    std::lock_guard<std::mutex> lock(slot.mu);
    --slot.held_grads;
  }
  buckets_->on_ready(i, begin, end);  // the last replica to get here launches reduce()
}

// Called by the buckets (their lock held) with every comm stream already waiting
// for the range's backward on every replica.
void ShardedStorage::reduce(int64_t begin, int64_t end) {
  auto it = std::find_if(units_.begin(), units_.end(),
                         [&](const ParamUnit& u) { return u.begin <= begin && end <= u.end; });
  FANOUT_ASSERT(it != units_.end(), "a reduction outside every unit");
  const int unit = static_cast<int>(it - units_.begin());
  const int64_t len = end - begin;
  const int n = static_cast<int>(slots_.size());
  std::vector<Tensor> bufs(n);
  std::vector<bool> owned(n, false);
  for (int i = 0; i < n; ++i) {
    Slot& slot = *slots_[i];
    {
      std::lock_guard<std::mutex> lock(slot.mu);
      auto g = slot.grad_bufs.find(begin);
      if (g != slot.grad_bufs.end()) {
        bufs[i] = g->second;
        owned[i] = true;
        slot.grad_bufs.erase(g);
      }
    }
    if (!bufs[i].defined()) {  // an idle replica adds zeros
      FANOUT_ASSERT(!active_[i], "replica ", i, " reported [", begin, ", ", end,
                    ") without its gradients");
      bufs[i] = Tensor::empty({len}, DType::f32, slot.replica->device(), MemTag::grads);
      flat_fill(*comm_[i], bufs[i], 0.0f);
    }
  }
  // Each rank's piece of the unit, cut to this range, relative to its start.
  const std::vector<int64_t>& ub = shards_.bounds(unit);
  std::vector<int64_t> rb(ub.size());
  for (size_t r = 0; r < ub.size(); ++r) rb[r] = std::clamp(ub[r], begin, end) - begin;
  peers_.reduce_scatter(bufs, comm_, rb, 0, len);
  for (int i = 0; i < n; ++i) {
    Slot& slot = *slots_[i];
    const int rank = rank0_ + i;
    int64_t lo = rb[rank], hi = rb[rank + 1];
    if (lo < hi) {
      StreamSpan span(*comm_[i], "accumulate shard");
      int64_t at = shards_.offset(unit, rank) + (begin + lo - ub[rank]);
      flat_add(*comm_[i], slot.grads.view(at, {hi - lo}), bufs[i].view(lo, {hi - lo}));
    }
    if (owned[i]) {
      free_after(i, *comm_[i], std::move(bufs[i]), &Slot::live_grads);
    } else if (comm_[i]->device().is_cpu()) {
      comm_[i]->enqueue_marker([t = std::move(bufs[i])]() mutable { t = Tensor(); });
    }
  }
}

void ShardedStorage::abort() {
  aborted_ = true;
  for (auto& slot : slots_) {
    { std::lock_guard<std::mutex> lock(slot->mu); }
    slot->freed.notify_all();
  }
}

void ShardedStorage::reset() {
  buckets_->disarm();
  aborted_ = false;
  for (auto& slot : slots_) {
    if (slot->fetch) {
      try {
        slot->fetch->synchronize();
      } catch (...) {
      }
    }
    std::lock_guard<std::mutex> lock(slot->mu);
    // Buffers still referenced by queued work were drained with the streams.
    slot->live_weights -= static_cast<int>(slot->held.size());
    slot->held.clear();
    slot->live_grads -= static_cast<int>(slot->grad_bufs.size());
    slot->held_grads = 0;
    slot->grad_bufs.clear();
  }
}

}  // namespace fanout::parallel
