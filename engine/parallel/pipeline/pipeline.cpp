#include "engine/parallel/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/parallel/collectives/collectives.h"
#include "engine/parallel/pipeline/pipeline_lane.h"
#include "engine/parallel/pipeline/pipeline_store.h"
#include "engine/parallel/step_aborted.h"
#include "engine/parallel/tensor/tensor_peers.h"

namespace fanout::parallel {

Pipeline::Pipeline(const StageFactory& factory, PipelineOptions options)
    : options_(std::move(options)) {
  const int K = options_.stages, T = options_.tensor;
  const int n = static_cast<int>(options_.devices.size());
  FANOUT_CHECK(K >= 1, "--pp must be at least 1, got ", K);
  FANOUT_CHECK(T >= 1, "--tp must be at least 1, got ", T);
  FANOUT_CHECK(n % (int64_t{K} * T) == 0, "--pp ", K, T > 1 ? " x --tp " + std::to_string(T) : "",
               " does not divide the ", n, " devices listed");
  replicas_ = n / (K * T);
  for (const Device& d : options_.devices) {
    FANOUT_CHECK(d.is_cuda() == options_.devices[0].is_cuda(),
                 "a pipeline's devices are all CPU devices or all CUDA devices, got ",
                 devices_str(options_.devices));
  }
  if (options_.micro_batches == 0) options_.micro_batches = 2 * K;
  FANOUT_CHECK(options_.micro_batches >= 1, "--micro-batches must be at least 1, got ",
               options_.micro_batches);
  FANOUT_ASSERT(static_cast<int>(options_.cut.size()) == K + 1 && options_.cut[0] == 0,
                "a stage cut needs ", K + 1, " bounds");
  pipeline_strategy_check(options_.strategy, T, options_.schedule,
                          K > 1 ? "--pp " + std::to_string(K) : "--tp " + std::to_string(T));
  schedule_ = make_schedule(options_.schedule, K, options_.micro_batches);
  check_schedule(schedule_);
  // Activation slots: the most micro-batches a stage holds at once (each stage
  // runs its list in order, so the simulation's count is the real one).
  for (int in_flight : simulate_schedule(schedule_).peak_in_flight)
    slots_.push_back(std::max(in_flight, 1));
  if (T > 1) {
    for (int d = 0; d < replicas_; ++d) {
      for (int s = 0; s < K; ++s) {
        std::vector<Device> group;
        for (int t = 0; t < T; ++t) group.push_back(options_.devices[index(s, d, t)]);
        peers_.push_back(std::make_unique<TensorPeers>(group));
        tensor_comms_.push_back(make_collectives(group));
      }
    }
  }
  for (int lane = 0; lane < n; ++lane) {
    const LanePos p = pos(lane);
    StageSpot spot{options_.devices[lane],
                   p.stage,
                   p.replica,
                   p.t,
                   options_.cut[p.stage],
                   options_.cut[p.stage + 1],
                   T > 1 ? peers_[p.replica * K + p.stage].get() : nullptr};
    stages_.push_back(factory(spot));
  }
  for (int s = 0; s < K; ++s) {
    for (int t = 0; t < T; ++t) {
      const ParamUnit r = stage(s, 0, t).stage_range();
      FANOUT_ASSERT(
          r.begin == (s == 0 ? 0 : stage(s - 1, 0, t).stage_range().end) && r.end > r.begin,
          "stage ", s, "'s range does not follow the one before");
      FANOUT_ASSERT(r.begin == stage(s).stage_range().begin && r.end == stage(s).stage_range().end,
                    "tensor-parallel ranks of stage ", s, " differ in size");
      pieces_.push_back(stage(s, 0, t).pieces());
      for (const FlatPiece& pc : pieces_.back()) {
        FANOUT_ASSERT(pc.local >= r.begin && pc.local + pc.count <= r.end, "a piece of stage ", s,
                      " outside its range");
        whole_ = std::max(whole_, pc.whole + pc.count);
      }
    }
  }
  total_ = stage(K - 1).stage_range().end;
  if (zero2()) make_stores();
  make_shards();
  for (int i = 0; i < n; ++i) lanes_.push_back(std::make_unique<Lane>(options_.devices[i]));
  pool_ = std::make_unique<ThreadPool>(options_.devices);
  posted_.assign(static_cast<size_t>(n) * options_.micro_batches * 2, 0);
  if (replicas_ > 1 && !zero2()) {  // zero2: its stores' peers
    for (int s = 0; s < K; ++s) {
      for (int t = 0; t < T; ++t) {
        std::vector<Device> group;
        for (int d = 0; d < replicas_; ++d) group.push_back(options_.devices[index(s, d, t)]);
        stage_comms_.push_back(make_collectives(group));
        stage_comms_.back()->set_sum_dtype(options_.grad_comm);
      }
    }
  }
}

Pipeline::~Pipeline() {
  if (zero2())
    for (auto& st : stages_) st->as_replica().set_grad_ready_callback(nullptr);
}

AllocatorStats Pipeline::memory(int s, int replica, int t) const {
  return allocator_for(stages_[index(s, replica, t)]->device()).stats();
}

int64_t Pipeline::bytes_moved() const {
  int64_t total = bytes_moved_;
  for (const auto& c : stage_comms_) total += c->bytes_moved();
  for (const auto& p : peers_) total += p->bytes_moved();
  for (const auto& c : tensor_comms_) total += c->bytes_moved();
  return total + stores_bytes_moved();
}

void Pipeline::zero_grad() {
  for (auto& st : stages_) st->zero_grads();
  zero_stores();
}

// --- weights and gradients, whole, on the host ---------------------------------

// Each stage its pieces of the whole (a tensor-parallel rank's padding rows zero).
void Pipeline::params_from_host(const float* values) {
  for (int lane = 0; lane < static_cast<int>(stages_.size()); ++lane) {
    PipeStage& st = *stages_[lane];
    const LanePos p = pos(lane);
    const ParamUnit r = st.stage_range();
    std::vector<float> host(static_cast<size_t>(r.end - r.begin), 0.0f);
    for (const FlatPiece& pc : pieces_[p.stage * options_.tensor + p.t])
      std::copy(values + pc.whole, values + pc.whole + pc.count, host.data() + pc.local - r.begin);
    tensor_upload(st.compute_stream(), st.params(), host.data());
    st.params_to_working(r.begin, r.end);
  }
  sync_tied();
}

// Each shard from its owner (zero1 in bf16: an owner's master is current in
// its own shard only).
void Pipeline::params_to_host(float* values) {
  std::vector<Tensor> per_shard;
  for (int i = 0; i < static_cast<int>(shards_.size()); ++i) per_shard.push_back(shard_params(i));
  shards_to_host(per_shard, values);
}

void Pipeline::grads_to_host(float* values) {
  std::vector<Tensor> per_shard;
  for (int i = 0; i < static_cast<int>(shards_.size()); ++i) per_shard.push_back(shard_grads(i));
  shards_to_host(per_shard, values);
}

// --- after backward -----------------------------------------------------------

std::pair<std::vector<Tensor>, std::vector<Stream*>> Pipeline::across_replicas(
    int s, int t, Tensor (PipeStage::*buffer)()) {
  std::pair<std::vector<Tensor>, std::vector<Stream*>> out;
  for (int d = 0; d < replicas_; ++d) {
    out.first.push_back((stage(s, d, t).*buffer)());
    out.second.push_back(&stage(s, d, t).compute_stream());
  }
  return out;
}

bool Pipeline::tied() {
  return stages() > 1 && stage(stages() - 1).tied_grads().defined();
}

// Replica d's first stage (rank t) gets the tied lm_head's gradient added
// (queued on its stream, once the last stage's work is done).
void Pipeline::add_tied(int d, int t) {
  const int K = stages();
  Tensor tied = stage(K - 1, d, t).tied_grads();
  PipeStage& first = stage(0, d, t);
  Lane& ln = *lanes_[index(0, d, t)];
  if (!ln.tied_staging.defined() || ln.tied_staging.numel() < tied.numel())
    ln.tied_staging = Tensor::empty({tied.numel()}, DType::f32, first.device(), MemTag::grads);
  Tensor staging = ln.tied_staging.view(0, {tied.numel()});
  copy_between(first.compute_stream(), staging, tied);
  flat_add(first.compute_stream(), first.grads().view(0, {tied.numel()}), staging);
}

// Stage s's gradients over its replicas: summed onto replica 0 (dp), or
// reduce-scattered (zero1); queued on the stage's streams.
// Note [Sequence parallelism] (models/): each tensor rank's gradient of the norm
// weights covers its rows only; summed over the ranks, every rank holds it whole.
void Pipeline::sum_partial_pieces(int s, int d) {
  if (tensor() == 1) return;
  std::vector<Tensor> bufs;
  std::vector<Stream*> streams;
  for (int t = 0; t < tensor(); ++t) {
    bufs.push_back(stage(s, d, t).grads());
    streams.push_back(&stage(s, d, t).compute_stream());
  }
  const int64_t begin = stage(s).stage_range().begin;
  for (const FlatPiece& pc : pieces_[s * tensor()]) {
    if (pc.partial)
      tensor_comms_[d * stages() + s]->all_reduce(bufs, streams, pc.local - begin,
                                                  pc.local - begin + pc.count);
  }
}

void Pipeline::reduce_stage(int s) {
  for (int d = 0; d < replicas_; ++d) sum_partial_pieces(s, d);
  if (replicas_ == 1 || zero2()) return;  // zero2: reduced during backward
  for (int t = 0; t < tensor(); ++t) {
    auto [bufs, streams] = across_replicas(s, t, &PipeStage::grads);
    if (zero1())
      stage_comm(s, t).reduce_scatter(bufs, streams, bounds_[s], 0, bufs[0].numel());
    else
      stage_comm(s, t).reduce(bufs, streams, 0, 0, bufs[0].numel());
  }
}

// --overlap: the last of a stage's replicas to finish the step's schedule
// queues the stage's gradient sum, which runs while the stages before it still
// compute (stage 0's once the tied lm_head's gradient joined it).
void Pipeline::stage_done(int s) {
  const int K = stages();
  {
    std::unique_lock<std::mutex> lock(mu_);
    const int lanes = replicas_ * tensor();
    const bool last = ++stage_done_[s] == lanes;
    cv_.notify_all();
    if (!last) return;
    if (s == 0 && tied()) {
      cv_.wait(lock, [&] { return stage_done_[K - 1] == lanes || aborted_; });
      if (aborted_) throw StepAborted("stopped: another stage failed in this step");
    }
  }
  if (s == 0 && tied()) add_tied_all();
  reduce_stage(s);
}

void Pipeline::reduce_gradients() {
  if (!reduced_) {
    if (tied()) add_tied_all();
    for (int s = 0; s < stages(); ++s) reduce_stage(s);
  }
  reduced_ = false;
  for (auto& st : stages_) st->compute_stream().synchronize();
  sync_stores();
}

// Every replica's (and tensor rank's) tied lm_head gradient into its embedding's.
void Pipeline::add_tied_all() {
  if (zero2()) return add_tied_sharded();
  for (int d = 0; d < replicas_; ++d)
    for (int t = 0; t < tensor(); ++t) add_tied(d, t);
}

// --- the optimizer's half -------------------------------------------------------

// dp: one shard per stage and tensor rank, replica 0's; zero1: one per stage,
// rank and replica, the replica's part of the stage (bounds_); zero2: one per
// stage, unit and replica (its store's pieces). Rank t's layout sits at
// t * total_ of the grid's flat space.
void Pipeline::make_shards() {
  for (int s = 0; s < stages(); ++s) {
    if (zero2()) {
      bounds_.emplace_back();
      make_sharded_shards(s);
      continue;
    }
    const ParamUnit r = stage(s).stage_range();
    const int owners = zero1() ? replicas_ : 1;
    bounds_.push_back(shard_bounds(r.end - r.begin, owners));
    for (int t = 0; t < tensor(); ++t)
      for (int d = 0; d < owners; ++d)
        shards_.push_back({s, d, t, bounds_[s][d], bounds_[s][d + 1], t * total_ + r.begin});
  }
}

std::vector<ParamUnit> Pipeline::shards() const {
  std::vector<ParamUnit> out;
  for (const ShardAt& sh : shards_) out.push_back({sh.base + sh.lo, sh.base + sh.hi});
  return out;
}

Tensor Pipeline::shard_params(int i) {
  return owner(i).params().view(shards_[i].lo, {shards_[i].hi - shards_[i].lo});
}

Tensor Pipeline::shard_grads(int i) {
  const ShardAt& sh = shards_[i];
  if (zero2()) return store_grads(sh.stage, sh.replica).view(sh.grad_at, {sh.hi - sh.lo});
  return owner(i).grads().view(sh.lo, {sh.hi - sh.lo});
}

Tensor Pipeline::shard_working(int i) {
  const ShardAt& sh = shards_[i];
  PipeStage& st = owner(i);
  if (st.working_dtype() == DType::f32) return Tensor();
  return st.working_params().view(sh.lo, {sh.hi - sh.lo});
}

// fn(i) for every shard on its owner's thread (an owner's shards in order); the
// owners' streams drained.
void Pipeline::run_on_shards(const std::function<void(int)>& fn) {
  std::vector<int> owners;
  for (const ShardAt& sh : shards_) owners.push_back(index(sh.stage, sh.replica, sh.t));
  std::vector<int> lanes = owners;
  std::sort(lanes.begin(), lanes.end());
  lanes.erase(std::unique(lanes.begin(), lanes.end()), lanes.end());
  pool_->run_on(lanes, [&](int lane) {
    for (int i = 0; i < static_cast<int>(owners.size()); ++i)
      if (owners[i] == lane) fn(i);
    stages_[lane]->compute_stream().synchronize();
  });
}

double Pipeline::sum_over_shards(const std::function<double(int)>& partial) {
  std::vector<double> parts(shards_.size(), 0.0);
  run_on_shards([&](int i) { parts[i] = partial(i); });
  double total = 0;
  for (double p : parts) total += p;
  return total;
}

void Pipeline::update_shards(const std::function<bool(int)>& update) {
  run_on_shards([&](int i) {
    if (update(i)) return;
    const ShardAt& sh = shards_[i];
    const int64_t begin = stage(sh.stage).stage_range().begin;
    owner(i).params_to_working(begin + sh.lo, begin + sh.hi);
  });
  sync_replicas();
  sync_tied();
}

void Pipeline::for_each_piece(int i,
                              const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  const ShardAt& sh = shards_[i];
  const int64_t begin = stages_[index(sh.stage, 0, sh.t)]->stage_range().begin;
  for (const FlatPiece& pc : pieces_[sh.stage * options_.tensor + sh.t]) {
    if (pc.shared && sh.t > 0) continue;
    const int64_t lo = std::max(pc.local - begin, sh.lo);
    const int64_t hi = std::min(pc.local + pc.count - begin, sh.hi);
    if (lo < hi) fn(pc.whole + (lo - (pc.local - begin)), lo - sh.lo, hi - lo);
  }
}

void Pipeline::shards_to_host(const std::vector<Tensor>& per_shard, float* out) {
  FANOUT_ASSERT(per_shard.size() == shards_.size(), "one tensor per shard");
  std::vector<float> host;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ShardAt& sh = shards_[i];
    host.resize(static_cast<size_t>(sh.hi - sh.lo));
    tensor_to_host(owner(static_cast<int>(i)).compute_stream(),
                   per_shard[i].view(0, {sh.hi - sh.lo}), host.data());
    for_each_piece(static_cast<int>(i), [&](int64_t whole, int64_t at, int64_t n) {
      std::copy(host.data() + at, host.data() + at + n, out + whole);
    });
  }
}

// Values a shard holds outside every piece (a tensor-parallel rank's padding
// rows) are zero; shared pieces of ranks t > 0 get the same values as rank 0's.
void Pipeline::host_to_shards(const float* in, const std::vector<Tensor>& per_shard) {
  FANOUT_ASSERT(per_shard.size() == shards_.size(), "one tensor per shard");
  std::vector<float> host;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ShardAt& sh = shards_[i];
    host.assign(static_cast<size_t>(sh.hi - sh.lo), 0.0f);
    const int64_t begin = stage(sh.stage, 0, sh.t).stage_range().begin;
    for (const FlatPiece& pc : pieces_[sh.stage * options_.tensor + sh.t]) {
      const int64_t lo = std::max(pc.local - begin, sh.lo);
      const int64_t hi = std::min(pc.local + pc.count - begin, sh.hi);
      if (lo < hi)
        std::copy(in + pc.whole + (lo - (pc.local - begin)),
                  in + pc.whole + (hi - (pc.local - begin)), host.data() + (lo - sh.lo));
    }
    Stream& stream = owner(static_cast<int>(i)).compute_stream();
    tensor_upload(stream, per_shard[i].view(0, {sh.hi - sh.lo}), host.data());
    stream.synchronize();
  }
}

// Rank t > 0's copies of shared values (the norm weights) count once, as rank 0's.
std::vector<ParamUnit> Pipeline::shard_counted(int i) const {
  const ShardAt& sh = shards_[i];
  if (sh.t == 0) return {{0, sh.hi - sh.lo}};
  std::vector<ParamUnit> out;
  int64_t at = 0;
  const int64_t begin = stages_[index(sh.stage, 0, sh.t)]->stage_range().begin;
  for (const FlatPiece& pc : pieces_[sh.stage * options_.tensor + sh.t]) {
    if (!pc.shared) continue;
    const int64_t lo = std::max(pc.local - begin, sh.lo) - sh.lo;
    const int64_t hi = std::min(pc.local + pc.count - begin, sh.hi) - sh.lo;
    if (lo >= hi) continue;
    if (at < lo) out.push_back({at, lo});
    at = hi;
  }
  if (at < sh.hi - sh.lo) out.push_back({at, sh.hi - sh.lo});
  return out;
}

// Every replica's working weights <- replica 0's (dp: the only one updated), or
// each owner's shard (zero1).
void Pipeline::sync_replicas() {
  for (int s = 0; s < stages() && replicas_ > 1; ++s) {
    if (zero2()) {
      gather_sharded(s);
      continue;
    }
    for (int t = 0; t < tensor(); ++t) {
      auto [bufs, streams] = across_replicas(s, t, &PipeStage::working_params);
      if (zero1())
        stage_comm(s, t).all_gather(bufs, streams, bounds_[s], 0, bufs[0].numel());
      else
        stage_comm(s, t).broadcast(bufs, streams, 0, 0, bufs[0].numel());
      for (Stream* st : streams) st->synchronize();
    }
  }
}

// A tied lm_head's copy <- its replica's first-stage embedding (working weights).
void Pipeline::sync_tied() {
  const int K = stages();
  for (int d = 0; d < replicas_ && K > 1; ++d) {
    for (int t = 0; t < tensor(); ++t) {
      PipeStage& last = stage(K - 1, d, t);
      Tensor tied = last.tied_weights();
      if (!tied.defined()) return;
      PipeStage& first = stage(0, d, t);
      first.compute_stream().synchronize();
      copy_between(last.compute_stream(), tied, first.working_params().view(0, {tied.numel()}));
      last.compute_stream().synchronize();
    }
  }
}

}  // namespace fanout::parallel
