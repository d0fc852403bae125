// zero2 within a pipeline stage: the stage's replicas keep their gradients in a
// ShardedStorage over the stage's units, as DataParallel's zero2 does over the
// whole model's.

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/parallel/collectives/replica_group.h"
#include "engine/parallel/pipeline/pipeline.h"
#include "engine/parallel/pipeline/pipeline_store.h"
#include "engine/parallel/step_aborted.h"
#include "engine/parallel/zero/sharded_storage.h"

namespace fanout::parallel {

// Note [zero2 in a pipeline]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A stage's replicas run the same list of actions, each on its own host thread.
// Each backward of a micro-batch hands the stage's units over one by one (the
// model's grad-ready callback); a unit is reduce-scattered over the stage's
// replicas once every replica has handed it over, each owner adding its piece
// to its shard, and the unit's buffer is freed. So a replica never holds its
// stage's gradients whole: its shards (1/D of the stage) and the units in
// flight. The store counts hand-overs for one backward at a time, so the
// replicas of a stage meet before each backward, and the last to arrive arms
// the store for it. This wait couples only the replicas of one stage, which
// run identical lists: a lock-step run of all replicas is a valid order, so
// the wait cannot deadlock. A tied lm_head's gradient (whole on the last
// stage, accumulated over the step) joins the embedding's shards once, before
// the update. The zero-bubble schedule's weight gradients come apart from
// backward, and tensor parallelism sums some gradients over its ranks after
// the step: neither combines with this (pipeline_strategy_check).

void pipeline_strategy_check(Strategy strategy, int tensor, PipeSchedule schedule,
                             const std::string& flag) {
  FANOUT_CHECK(
      strategy == Strategy::dp || strategy == Strategy::zero1 || strategy == Strategy::zero2, flag,
      " shares each stage among its replicas as --strategy dp, zero1 or zero2 does; it "
      "does not combine with --strategy ",
      strategy_name(strategy));
  if (strategy != Strategy::zero2) return;
  FANOUT_CHECK(tensor == 1, flag,
               " with --strategy zero2: tensor-parallel ranks sum part of their gradients after "
               "the step, which needs them whole; use --strategy zero1");
  FANOUT_CHECK(schedule != PipeSchedule::zb1,
               "--pp-schedule zb1 computes the weight gradients apart from backward, while "
               "--strategy zero2 reduces each unit's gradient as backward makes it: use "
               "--pp-schedule 1f1b or gpipe, or --strategy zero1");
}

// Before any stage buffer exists: the models' gradients go to the stores.
void Pipeline::make_stores() {
  const int K = stages(), D = replicas_;
  for (int s = 0; s < K; ++s) {
    auto st = std::make_unique<StageStore>();
    Replica& first = stage(s).as_replica();
    const ParamUnit r = stage(s).stage_range();
    std::vector<ParamUnit> units;
    int u = 0;
    for (const ParamUnit& unit : first.units()) {
      if (unit.begin >= r.begin && unit.end <= r.end) {
        if (units.empty()) st->first_unit = u;
        units.push_back(unit);
      }
      ++u;
    }
    FANOUT_ASSERT(!units.empty() && units.front().begin == r.begin && units.back().end == r.end,
                  "stage ", s, "'s units do not tile its range");
    st->shards = std::make_unique<UnitShards>(units, D);
    std::vector<Device> devices;
    std::vector<Replica*> reps;
    for (int d = 0; d < D; ++d) {
      PipeStage& ps = stage(s, d);
      devices.push_back(ps.device());
      reps.push_back(&ps.as_replica());
      st->comm.push_back(
          std::make_unique<Stream>(ps.device(), ps.compute_stream().name() + " comm"));
    }
    st->peers = std::make_unique<ReplicaGroup>(devices, nullptr, options_.grad_comm);
    ShardedStorage::Options so;
    so.working = stage(s).working_dtype();
    so.first_unit = st->first_unit;
    st->storage = std::make_unique<ShardedStorage>(reps, *st->shards, *st->peers, so);
    for (int d = 0; d < D; ++d) {
      ShardedStorage* storage = st->storage.get();
      reps[d]->set_unit_store(storage->store(d), false);
      reps[d]->set_grad_ready_callback(
          [storage, d](int64_t begin, int64_t end) { storage->grads_ready(d, begin, end); });
    }
    stores_.push_back(std::move(st));
  }
}

// Stage s's shards, unit-major (every replica's piece of a unit, then the next
// unit's): ascending in the flat layout.
void Pipeline::make_sharded_shards(int s) {
  const StageStore& st = *stores_[s];
  const int64_t begin = stage(s).stage_range().begin;
  for (int k = 0; k < static_cast<int>(st.shards->units().size()); ++k) {
    const std::vector<int64_t>& b = st.shards->bounds(k);
    for (int d = 0; d < replicas_; ++d) {
      if (b[d] == b[d + 1]) continue;  // a unit smaller than the replicas
      ShardAt sh{s, d, 0, b[d] - begin, b[d + 1] - begin, begin};
      sh.grad_at = st.shards->offset(k, d);
      shards_.push_back(sh);
    }
  }
}

void Pipeline::arm_store(int s) {
  StageStore& st = *stores_[s];
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t round = st.round;
  if (++st.arrived < replicas_) {
    cv_.wait(lock, [&] { return st.round != round || aborted_; });
    if (st.round == round) throw StepAborted("stopped: another stage failed in this step");
    return;
  }
  // Every replica finished its previous backward: each unit it handed over was
  // launched.
  st.end_backward();
  std::vector<Stream*> comm;
  for (auto& c : st.comm) comm.push_back(c.get());
  st.storage->begin_backward(std::vector<bool>(replicas_, true), comm);
  st.armed = true;
  st.arrived = 0;
  ++st.round;
  cv_.notify_all();
}

void Pipeline::finish_stores() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& st : stores_) st->end_backward();
}

// The copies on the first stage's devices live until their comm stream is past
// them (a CUDA free is ordered by the allocator: Note [CUDA allocation ordering]).
void Pipeline::add_tied_sharded() {
  const int K = stages(), D = replicas_;
  StageStore& st = *stores_[0];
  const ParamUnit embed = st.shards->units()[0];
  const int64_t len = embed.end - embed.begin;
  std::vector<Tensor> bufs;
  std::vector<Stream*> comm;
  for (int d = 0; d < D; ++d) {
    Tensor tied = stage(K - 1, d).tied_grads();
    FANOUT_ASSERT(tied.numel() == len, "a tied lm_head's gradient differs from the embedding");
    comm.push_back(st.comm[d].get());
    bufs.push_back(Tensor::empty({len}, DType::f32, stage(0, d).device(), MemTag::grads));
    copy_between(*comm.back(), bufs.back(), tied);
  }
  const std::vector<int64_t> rb = st.shards->relative_bounds(0);
  st.peers->reduce_scatter(bufs, comm, rb, 0, len);
  for (int d = 0; d < D; ++d) {
    if (rb[d] == rb[d + 1]) continue;
    flat_add(*comm[d], st.storage->grads(d).view(st.shards->offset(0, d), {rb[d + 1] - rb[d]}),
             bufs[d].view(rb[d], {rb[d + 1] - rb[d]}));
  }
  for (int d = 0; d < D; ++d)
    if (comm[d]->device().is_cpu())
      comm[d]->enqueue_marker([t = std::move(bufs[d])]() mutable { t = Tensor(); });
}

void Pipeline::gather_sharded(int s) {
  StageStore& st = *stores_[s];
  const int64_t begin = stage(s).stage_range().begin;
  auto [bufs, streams] = across_replicas(s, 0, &PipeStage::working_params);
  for (int k = 0; k < static_cast<int>(st.shards->units().size()); ++k) {
    std::vector<int64_t> b = st.shards->bounds(k);
    for (int64_t& x : b) x -= begin;
    st.peers->all_gather(bufs, streams, b, b.front(), b.back());
  }
  for (Stream* stream : streams) stream->synchronize();
}

Tensor Pipeline::store_grads(int s, int replica) const {
  return stores_[s]->storage->grads(replica);
}

void Pipeline::zero_stores() {
  for (auto& st : stores_) st->storage->zero_grads();
}

void Pipeline::sync_stores() {
  for (auto& st : stores_)
    for (auto& c : st->comm) c->synchronize();
}

int64_t Pipeline::stores_bytes_moved() const {
  int64_t total = 0;
  for (const auto& st : stores_) total += st->peers->bytes_moved();
  return total;
}

void Pipeline::abort_stores() {
  for (auto& st : stores_) st->storage->abort();
}

// After a failed step: the comm streams drained, what the stores held forgotten.
void Pipeline::reset_stores() {
  for (auto& st : stores_) {
    for (auto& c : st->comm) {
      try {
        c->synchronize();
      } catch (...) {
      }
    }
    st->storage->reset();
    std::lock_guard<std::mutex> lock(mu_);
    st->arrived = 0;
    st->armed = false;
  }
}

}  // namespace fanout::parallel
