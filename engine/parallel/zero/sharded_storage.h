#pragma once
// ShardedStorage: where zero2 keeps gradients and zero3 keeps gradients and
// weights, one shard per rank (Note [Sharded storage] in sharded_storage.cpp).
//   shards    every unit is split evenly over the ranks (UnitShards, as FSDP
//             shards each flat parameter): rank r keeps its piece of every unit
//             -- its fp32 gradient sum (zero2, zero3) and, under zero3, its fp32
//             master weights and their working copy -- packed in one buffer of
//             each kind. The optimizer steps these pieces.
//   weights   (zero3) a replica asks for a unit's weights before it runs it; its
//             fetch stream copies every owner's piece into a unit-sized buffer
//             (across processes: an all-gather), the next unit is prefetched,
//             and the buffer is freed once the compute stream is past its use.
//   grads     a replica's backward accumulates a unit into a unit-sized buffer;
//             once every replica has queued the unit, it is reduce-scattered on
//             the comm streams, each owner adds its piece to its shard, and the
//             buffers are freed.
// At most `max_units` gathered units exist per replica at once, and a gradient
// buffer is allocated only once every buffer released before it was reduced and
// freed: a replica's host thread waits for its streams before it allocates more,
// so a queue that runs ahead cannot hold the whole model.

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/core/check.h"
#include "engine/parallel/collectives/replica_group.h"
#include "engine/parallel/grad_buckets.h"
#include "engine/parallel/replica.h"
#include "engine/parallel/step_aborted.h"

namespace fanout::parallel {

// Every unit split evenly over `ranks`: rank r owns [bounds(u)[r], bounds(u)[r+1])
// of the flat layout for each unit u, kept at offset(u, r) of its shard buffer.
class UnitShards {
 public:
  UnitShards(std::vector<ParamUnit> units, int ranks);
  int ranks() const { return ranks_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  const std::vector<int64_t>& bounds(int u) const { return bounds_[u]; }
  // Unit u's bounds relative to its first element.
  std::vector<int64_t> relative_bounds(int u) const;
  int64_t offset(int u, int r) const { return offset_[u][r]; }
  int64_t size(int r) const { return size_[r]; }

 private:
  std::vector<ParamUnit> units_;
  int ranks_;
  std::vector<std::vector<int64_t>> bounds_, offset_;
  std::vector<int64_t> size_;
};

class ShardedStorage {
 public:
  struct Options {
    bool weights = false;        // zero3: the weights are sharded too
    DType working = DType::f32;  // the dtype the replicas compute with
    int max_units = 2;           // per replica: gathered units
    // The models' index of shards.units()[0]: a pipeline stage's first unit
    // (its units are the whole model's [first_unit, first_unit + count)).
    int first_unit = 0;
  };
  // replicas: this process's replicas, local rank i = global rank
  // peers.rank0() + i of shards.ranks(). Sums and gathers go through `peers`
  // (several replicas in this process, or one replica per process).
  ShardedStorage(const std::vector<Replica*>& replicas, const UnitShards& shards,
                 ReplicaGroup& peers, Options options);
  ~ShardedStorage();
  ShardedStorage(const ShardedStorage&) = delete;
  ShardedStorage& operator=(const ShardedStorage&) = delete;

  // What local replica i's model talks to.
  UnitStore* store(int i);
  // Replica i reported [begin, end) (one of its grad_ranges()) final: its
  // gradients for this backward are all queued (the engine's grad-ready callback).
  void grads_ready(int i, int64_t begin, int64_t end);

  // Local replica i's shard buffers, UnitShards::size(rank) elements (master and
  // working weights exist under zero3 only).
  Tensor master(int i) const;
  Tensor working(int i) const;
  Tensor grads(int i) const;

  // Queued on each replica's compute stream: gradient shards <- 0.
  void zero_grads();
  // zero3: working shard <- master shard (rounded), on replica i's compute stream.
  void master_to_working(int i);
  // Arms the reductions for one backward; `active[i]`: replica i has rows.
  void begin_backward(const std::vector<bool>& active, const std::vector<Stream*>& comm);
  // After the backward was queued: every unit was handed to its reduction.
  bool all_reduced() const { return buckets_->all_launched(); }
  void end_backward() { buckets_->disarm(); }
  // A replica failed mid-step: replicas waiting for room give up (they would wait
  // for reductions the failed one never joins).
  void abort();
  // After a failure, with every stream drained: forget what was held.
  void reset();

  // Bytes of weights this store moved between devices or sent to other processes.
  int64_t weight_bytes() const { return weight_bytes_.load(); }

 private:
  struct Slot;
  class View;
  Tensor acquire_weights(int i, int unit, int next);
  void release_weights(int i, int unit);
  Tensor acquire_grads(int i, int unit, int64_t begin, int64_t end);
  // With slot.mu held (lock): starts gathering `unit` on the fetch stream,
  // waiting for room first.
  void gather(int i, int unit, std::unique_lock<std::mutex>& lock);
  // The reduction of the unit [begin, end), launched by the buckets.
  void reduce(int64_t begin, int64_t end);
  // Drops t once `stream` has run everything queued so far, then decrements
  // `count` under the slot's lock.
  void free_after(int i, Stream& stream, Tensor t, int Slot::*count);

  std::vector<Replica*> replicas_;
  const UnitShards& shards_;
  const std::vector<ParamUnit>& units_;
  int rank0_;
  ReplicaGroup& peers_;
  distributed::ProcessGroup* group_;  // peers_.processes(): nullptr in one process
  Options options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<View>> views_;
  std::unique_ptr<GradBuckets> buckets_;
  std::vector<Stream*> comm_;  // of the current backward
  std::vector<bool> active_;
  std::atomic<int64_t> weight_bytes_{0};
  std::atomic<bool> aborted_{false};
};

}  // namespace fanout::parallel
