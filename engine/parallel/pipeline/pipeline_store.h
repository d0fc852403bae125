#pragma once
// Pipeline::StageStore (zero2): one stage's gradient shards over its replicas
// -- a ShardedStorage over the stage's units, its peers, a comm stream per
// replica -- and the count by which the replicas meet before each backward
// (Note [zero2 in a pipeline] in pipeline_zero2.cpp). Internal to
// engine/parallel/pipeline/.

#include <memory>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/stream.h"
#include "engine/parallel/collectives/replica_group.h"
#include "engine/parallel/pipeline/pipeline.h"
#include "engine/parallel/zero/sharded_storage.h"

namespace fanout::parallel {

struct Pipeline::StageStore {
  // Declared in this order so that the store (which drains the comm streams
  // when it goes) goes first.
  std::vector<std::unique_ptr<Stream>> comm;  // per replica
  std::unique_ptr<UnitShards> shards;
  std::unique_ptr<ReplicaGroup> peers;
  std::unique_ptr<ShardedStorage> storage;
  int first_unit = 0;
  int arrived = 0;     // replicas at the next backward (under mu_)
  int64_t round = 0;   // backwards armed so far (under mu_)
  bool armed = false;  // (under mu_)

  // With mu_ held: the armed backward is over, every unit it was handed launched.
  void end_backward() {
    if (!armed) return;
    FANOUT_ASSERT(storage->all_reduced(), "a unit's gradients were never reduced");
    storage->end_backward();
    armed = false;
  }
};

}  // namespace fanout::parallel
