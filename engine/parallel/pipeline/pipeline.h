#pragma once
// Pipeline: a model cut into K stages on K devices, micro-batches streamed
// through them, in one process (torchgpipe's shape, without Python).
//   cut       stages hold contiguous runs of the model's units (balance.h)
//   schedule  a per-stage list of actions (schedule.h), checked for deadlock
//             before it runs, replayed by one host thread per stage, each
//             queueing work on its stage's compute stream
//   boundary  each stage copies its hidden state (forward) or input gradient
//             (backward) into a buffer on the receiving device and records an
//             event there; the receiver's stream waits for the event, its host
//             thread only for the action to have been queued
//   replicas  devices form a grid of D replicas x K stages (replica-major: the
//             K stages of a replica are neighbours); the batch's rows are split
//             over the replicas, each replica's into M micro-batches, and each
//             stage's gradients summed over its replicas onto replica 0's (dp),
//             or reduce-scattered over them, each updating its part (zero1), or
//             kept sharded: every micro-batch's gradients reduce-scattered unit
//             by unit during its backward into each replica's shards, never
//             whole (zero2, pipeline_zero2.cpp)
//   tied      a tied lm_head on the last stage is one logical weight with the
//             first stage's embedding: its gradient is added there before the
//             update, the updated weights copied back after it
//   tensor    each stage may itself be split over T devices (tensor
//             parallelism: a TensorPeers group per stage and replica, which the
//             stage's model calls inside its forward and backward); the T ranks
//             of a stage replay the same list in step, rank t of stage s
//             exchanging boundary tensors with rank t of its neighbours. The
//             grid is D x K x T devices, tensor peers neighbours.
// The loss is normalised once by the step's counted-token total (every replica,
// every micro-batch), as in DataParallel: N devices equal one device on the
// whole batch.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/thread_pool.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/pipeline/schedule.h"
#include "engine/parallel/pipeline/stage.h"
#include "engine/parallel/shard_set.h"
#include "engine/parallel/strategy.h"

namespace fanout::parallel {

struct PipelineOptions {
  // replicas x stages x tensor devices: devices[(d * stages + s) * tensor + t].
  std::vector<Device> devices;
  int stages = 1;
  int tensor = 1;  // tensor-parallel ranks per stage
  PipeSchedule schedule = PipeSchedule::one_f_one_b;
  int micro_batches = 0;  // per replica and step; 0: 2 x stages
  // How each stage's replicas share the update: dp (gradients summed onto
  // replica 0, which updates and broadcasts), zero1 (reduce-scattered: each
  // replica updates its part of the stage with its part of the AdamW state, the
  // parts all-gathered), or zero2 (zero1's parts, a piece of every unit, with the
  // gradients sharded as well; pipeline_strategy_check says what it needs).
  Strategy strategy = Strategy::dp;
  // Each stage's gradient sum starts as soon as its replicas finish the step's
  // schedule, while the stages before it still run backward.
  bool overlap = false;
  // The dtype each stage's gradient sums over its replicas travel in (f32, or
  // bf16 under --grad-comm bf16: Collectives::set_sum_dtype).
  DType grad_comm = DType::f32;
  // stages + 1 unit indices (balance.h): stage s holds units [cut[s], cut[s+1]).
  std::vector<int> cut;
  // Test hooks, on each stage's host thread before each action: fault_hook
  // throwing simulates a failing device; delay_hook may queue work (a random
  // sleep) on the stage's stream to shuffle timing.
  std::function<void(int stage, int replica, const Action& action)> fault_hook;
  std::function<void(Stream& stream, int stage, int replica, const Action& action)> delay_hook;
};

class Collectives;
class ReplicaGroup;
class TensorPeers;

// Refuses (one line) a data-parallel strategy a pipeline or tensor-parallel grid
// cannot share its stages with: dp, zero1, and zero2 without tensor parallelism
// and without the zero-bubble schedule (whose weight gradients come apart from
// backward, while zero2 reduces each unit's as backward makes it). `flag`: how
// the user asked for the grid ("--pp 2").
void pipeline_strategy_check(Strategy strategy, int tensor, PipeSchedule schedule,
                             const std::string& flag);

// Where a stage model goes in the grid: it holds units [first_unit, last_unit)
// on `device`; with tensor parallelism it is rank `tensor_rank` of `peers`.
struct StageSpot {
  Device device;
  int stage = 0, replica = 0, tensor_rank = 0;
  int first_unit = 0, last_unit = 0;
  TensorPeers* peers = nullptr;  // null without tensor parallelism
};

class Pipeline final : public ShardSet {
 public:
  using StageFactory = std::function<std::unique_ptr<PipeStage>(const StageSpot& spot)>;

  Pipeline(const StageFactory& factory, PipelineOptions options);
  ~Pipeline() override;
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  int stages() const { return options_.stages; }
  int replicas() const { return replicas_; }
  int tensor() const { return options_.tensor; }
  int micro_batches() const { return options_.micro_batches; }
  const PipelineOptions& options() const { return options_; }
  const Schedule& schedule() const { return schedule_; }
  PipeStage& stage(int s, int replica = 0, int t = 0) { return *stages_[index(s, replica, t)]; }
  // Elements of the whole model's flat layout.
  int64_t num_params() const override { return whole_; }

  // The whole fp32 master weights from or to the host (every stage its range;
  // replicas and tied copies follow).
  void params_from_host(const float* values);
  void params_to_host(float* values);
  // The reduced gradients, whole, to the host (after reduce_gradients).
  void grads_to_host(float* values);

  void zero_grad();
  // Forward and backward of a batch through the schedule; gradients accumulate.
  // FANOUT_CHECK: every replica gets at least micro_batches rows. `last` marks
  // the step's final batch (gradient accumulation): under overlap its gradient
  // sums start as each stage finishes.
  LossStats forward_backward(const HostBatch& batch, int32_t ignore_index, double normalizer,
                             bool last = true);
  // Each stage's gradients summed over its replicas onto replica 0, and a tied
  // lm_head's gradient added to the embedding's.
  void reduce_gradients();

  // --- ShardSet: the optimizer's half of a step, after reduce_gradients ---
  // dp: one shard per stage and tensor rank (replica 0's); zero1: one per stage,
  // tensor rank and replica. Each is updated on its owner's thread; then every
  // replica's working weights and a tied lm_head's copy follow. Shard ranges are
  // in the grid's own flat space: the T ranks' layouts one after the other.
  std::vector<ParamUnit> shards() const override;
  Device shard_device(int i) const override { return owner(i).device(); }
  Stream& shard_stream(int i) override { return owner(i).compute_stream(); }
  Tensor shard_params(int i) override;
  Tensor shard_grads(int i) override;
  Tensor shard_working(int i) override;
  double sum_over_shards(const std::function<double(int)>& partial) override;
  void update_shards(const std::function<bool(int)>& update) override;
  void shards_to_host(const std::vector<Tensor>& per_shard, float* out) override;
  void host_to_shards(const float* in, const std::vector<Tensor>& per_shard) override;
  std::vector<ParamUnit> shard_counted(int i) const override;

  // Forward only: the loss sum and counted tokens of a batch.
  LossStats evaluate(const HostBatch& batch, int32_t ignore_index);

  // Seconds of the last forward_backward (the whole schedule) and reduce.
  double last_step_seconds() const { return step_s_; }
  AllocatorStats memory(int stage, int replica = 0, int t = 0) const;
  // Bytes copied between distinct devices since construction: boundary
  // activations and gradients, gradient sums, weight copies.
  int64_t bytes_moved() const;

 private:
  struct Lane;  // one (replica, stage): boundary buffers, events, batch buffers
  // A shard: [lo, hi) of stage `stage`'s buffers on (`replica`, tensor rank t);
  // base: the stage's offset in the grid's flat space; grad_at (zero2): where
  // its gradients sit in the replica's shard buffer of the stage's store.
  struct ShardAt {
    int stage, replica, t;
    int64_t lo, hi, base;
    int64_t grad_at = -1;
  };
  struct StageStore;  // zero2: one stage's gradient shards (pipeline_zero2.cpp)
  struct LanePos {
    int stage, replica, t;
  };
  bool zero1() const { return options_.strategy == Strategy::zero1 && replicas_ > 1; }
  bool zero2() const { return options_.strategy == Strategy::zero2 && replicas_ > 1; }
  // --- zero2 (pipeline_zero2.cpp) ---
  void make_stores();
  void make_sharded_shards(int s);
  // Before each backward of stage s on one of its replicas: waits until every
  // replica is there, the last one arming the store for this micro-batch.
  void arm_store(int s);
  void finish_stores();  // after a step's schedule: every unit was reduced
  // The tied lm_head's gradient of every replica, reduce-scattered into the
  // embedding's shards (on the first stage's comm streams).
  void add_tied_sharded();
  void gather_sharded(int s);                    // each owner's pieces of stage s to every replica
  Tensor store_grads(int s, int replica) const;  // the replica's gradient shards
  void zero_stores();                            // queued: every shard <- 0
  void sync_stores();                            // the comm streams drained
  int64_t stores_bytes_moved() const;
  void abort_stores();
  void reset_stores();
  void make_shards();
  PipeStage& owner(int i) const {
    return *stages_[index(shards_[i].stage, shards_[i].replica, shards_[i].t)];
  }
  // Shard i's [lo, hi) <-> the whole layout, through its stage's pieces
  // (shared pieces of ranks t > 0 skipped): fn(whole offset, shard offset, count).
  void for_each_piece(int i, const std::function<void(int64_t, int64_t, int64_t)>& fn) const;
  void run_on_shards(const std::function<void(int)>& fn);
  int index(int s, int replica, int t = 0) const {
    return (replica * options_.stages + s) * options_.tensor + t;
  }
  LanePos pos(int lane) const {
    const int T = options_.tensor, K = options_.stages;
    return {(lane / T) % K, lane / (T * K), lane % T};
  }
  void run_lanes(const std::function<void(int)>& fn);
  void run_actions(int lane, const std::vector<int64_t>& rows, int64_t T, int32_t ignore_index,
                   float normalizer, bool backward);
  void prepare(const HostBatch& batch, const std::vector<std::vector<int64_t>>& rows);
  // Host-side: the action that fills (lane, micro, kind) was queued.
  void post(int lane, int micro, int kind);
  void wait_posted(int lane, int micro, int kind);
  void copy_between(Stream& stream, const Tensor& dst, const Tensor& src);
  LossStats step(const HostBatch& batch, int32_t ignore_index, double normalizer, bool backward,
                 bool last);
  bool tied();  // a tied lm_head on the last stage, apart from the embedding
  void add_tied(int replica, int t);
  void add_tied_all();
  void reduce_stage(int s);
  void sum_partial_pieces(int s, int replica);
  void stage_done(int s);
  // Stage s's buffer (grads, working_params) and compute stream on every replica
  // (of tensor rank t).
  std::pair<std::vector<Tensor>, std::vector<Stream*>> across_replicas(
      int s, int t, Tensor (PipeStage::*buffer)());
  Collectives& stage_comm(int s, int t) { return *stage_comms_[s * options_.tensor + t]; }
  void sync_replicas();  // replica 0's working weights to every copy
  void sync_tied();      // the first stage's embedding to a tied lm_head's copy
  void recover();

  PipelineOptions options_;
  int replicas_ = 1;
  int64_t total_ = 0;  // elements of one tensor rank's layout
  int64_t whole_ = 0;  // elements of the whole model's layout
  Schedule schedule_;
  std::vector<int> slots_;  // per stage: micro-batches in flight at most
  std::vector<std::unique_ptr<PipeStage>> stages_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::unique_ptr<Collectives>> stage_comms_;  // per stage and rank, over replicas
  std::vector<std::unique_ptr<StageStore>> stores_;        // zero2: per stage
  std::vector<std::unique_ptr<TensorPeers>> peers_;        // per replica and stage (T > 1)
  // Per replica and stage (T > 1): sums of partial pieces (FlatPiece::partial)
  // over the tensor ranks, after the step.
  std::vector<std::unique_ptr<Collectives>> tensor_comms_;
  std::vector<ShardAt> shards_;
  std::vector<std::vector<int64_t>> bounds_;    // per stage: its owners' parts
  std::vector<std::vector<FlatPiece>> pieces_;  // per stage and tensor rank
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> posted_;
  std::vector<int> stage_done_;  // --overlap: replicas done with this step, per stage
  bool reduced_ = false;         // --overlap queued every stage's sum in the step
  bool aborted_ = false;
  double step_s_ = 0;
  std::atomic<int64_t> bytes_moved_{0};
};

}  // namespace fanout::parallel
