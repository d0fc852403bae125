#pragma once
// ShardSet: what an optimizer sees of an engine -- the pieces of the flat layout
// it updates (shards), each held by one device with its fp32 master weights,
// summed gradients and working weights, and a way to run work on every shard's
// own thread at once. DataParallel's shards (one, or one per replica, or per
// replica and unit: data_parallel.h) and a Pipeline's (one per stage) both look
// like this, so one optimizer serves every engine.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/parallel/unit_store.h"

namespace fanout::parallel {

class DataParallel;

class ShardSet {
 public:
  virtual ~ShardSet() = default;
  // Elements of the whole flat layout.
  virtual int64_t num_params() const = 0;
  // [begin, end) of every shard, in a fixed order; shard i below is the i-th.
  virtual std::vector<ParamUnit> shards() const = 0;
  virtual Device shard_device(int i) const = 0;
  virtual Stream& shard_stream(int i) = 0;
  // (end - begin) elements each: fp32 master, summed f32 gradients, and the
  // working weights an optimizer may write in the same pass (undefined where
  // the master is the working copy, or where the engine rounds them itself).
  virtual Tensor shard_params(int i) = 0;
  virtual Tensor shard_grads(int i) = 0;
  virtual Tensor shard_working(int i) = 0;
  // partial(i) on every shard's own thread at once; the sum in shard order (and,
  // across processes, over every rank).
  virtual double sum_over_shards(const std::function<double(int)>& partial) = 0;
  // update(i) on every shard's own thread at once, returning whether it wrote
  // the shard's working weights; the engine then brings every copy up to date.
  virtual void update_shards(const std::function<bool(int)>& update) = 0;
  // One tensor per shard ((end - begin) values, e.g. optimizer state) -> the
  // whole flat buffer on the host.
  virtual void shards_to_host(const std::vector<Tensor>& per_shard, float* out) = 0;
  // The other way: the whole flat buffer on the host -> one tensor per shard.
  // By default shard i is [begin, end) of the whole layout.
  virtual void host_to_shards(const float* in, const std::vector<Tensor>& per_shard);
  // The ranges of shard i (offsets within it) whose squares the global gradient
  // norm counts: all of it, unless the shard holds copies of values another
  // shard counts (a tensor-parallel rank's copy of the norm weights).
  virtual std::vector<ParamUnit> shard_counted(int i) const;
};

// DataParallel's shards as a ShardSet (the engine outlives it).
std::unique_ptr<ShardSet> data_parallel_shards(DataParallel& dp);

}  // namespace fanout::parallel
