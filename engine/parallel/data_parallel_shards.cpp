// Shards: what each replica's optimizer owns (dp: the primary all of it; zero1:
// a contiguous 1/N each; zero2/zero3: a piece of every unit), the collectives
// over them, and the optimizer's half of a step, which the engine closes itself.
#include <atomic>

#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel_slot.h"
#include "engine/parallel/zero/sharded_storage.h"

namespace fanout::parallel {

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

void DataParallel::shards_to_host(const std::vector<Tensor>& per_shard, float* out) {
  std::vector<Shard> sh = shards();
  FANOUT_ASSERT(per_shard.size() == sh.size(), "one tensor per shard");
  if (!peers_->across_processes() || !sharded()) {
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
    peers_->all_gather(bufs, streams, bounds, begin, end);
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
  peers_->reduce_scatter(bufs, streams, bounds_, begin, end);
}

void DataParallel::run_on_shards_indexed(const std::vector<Shard>& sh,
                                         const std::function<void(size_t, Replica&)>& fn) {
  auto t0 = Clock::now();
  std::vector<int> which;
  for (const Shard& s : sh)
    if (which.empty() || which.back() != s.replica) which.push_back(s.replica);
  pool_->run_on(which, [&](int r) {
    for (size_t k = 0; k < sh.size(); ++k)
      if (sh[k].replica == r) fn(k, *replicas_[r]);
    replicas_[r]->compute_stream().synchronize();
  });
  times_.optimizer += seconds_since(t0);
}

double DataParallel::sum_over_shards(const std::function<double(const Shard&, Replica&)>& partial) {
  std::vector<Shard> sh = shards();
  std::vector<double> parts(sh.size(), 0.0);
  run_on_shards_indexed(sh, [&](size_t k, Replica& rep) { parts[k] = partial(sh[k], rep); });
  double total = 0;
  for (double p : parts) total += p;  // in shard order: the same sum on every run
  // Sharded across processes, each rank holds its own shards' part.
  if (sharded()) peers_->sum_host(&total, 1);
  return total;
}

void DataParallel::update_shards(const std::function<bool(const Shard&, Replica&)>& update) {
  std::vector<Shard> sh = shards();
  std::atomic<bool> working_written{true};
  run_on_shards_indexed(sh, [&](size_t k, Replica& rep) {
    if (!update(sh[k], rep)) working_written = false;
  });
  finish_step(working_written);
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

}  // namespace fanout::parallel
