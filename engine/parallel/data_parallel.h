#pragma once
// DataParallel: nn.DataParallel rebuilt for one process without a GIL.
//   scatter   the batch's rows over the replicas (uneven splits, explicit chunk
//             sizes, fewer replicas for a small batch)
//   replicate persistent replicas; only the (working) weights are broadcast
//             from the primary (device_ids[0]) after they changed
//   apply     one pool thread per device runs its replica on its own stream
//   gather    logits to output_device (faithful dp), or only loss scalars
//             (--loss-on replicas)
//   reduce    gradients reduce-added onto the primary after backward, or bucket
//             by bucket on comm streams while backward runs (--overlap), or
//             reduce-scattered so each device owns a shard (zero1), unit by unit
//             during backward into shards that are all a device keeps (zero2),
//             with the weights sharded too and gathered per unit (zero3; see
//             engine/parallel/zero/sharded_storage.h)
// Across processes (ProcessGroup) there is one replica per process: ddp sums
// whole gradients; zero1/zero2/zero3 shard over the ranks as over devices.
// The engine knows no model and no optimizer: the layer above supplies replicas
// (which own their loss, on their own rows or on gathered logits) and the update
// of each shard; the engine closes the step itself (update_shards).

#include <atomic>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/thread_pool.h"
#include "engine/distributed/process_group.h"
#include "engine/parallel/replica.h"
#include "engine/parallel/strategy.h"

namespace fanout::parallel {

struct DataParallelOptions {
  std::vector<Device> device_ids;
  std::optional<Device> output_device;  // default: device_ids[0]
  std::vector<int64_t> chunk_sizes;     // rows per replica; empty: split evenly
  Strategy strategy = Strategy::dp;
  LossOn loss_on = LossOn::output;
  bool overlap = false;
  double bucket_mb = 25.0;
  // The dtype gradient sums travel in: f32, or bf16 (rounded by each sender,
  // summed in fp32; Collectives::set_sum_dtype). Gradients stay f32 in memory.
  DType grad_comm = DType::f32;
  // Across processes (one replica per process): dp sums gradients over the ranks
  // (ddp); zero1/zero2/zero3 shard over them.
  distributed::ProcessGroup* process_group = nullptr;
  // Test hook, called on each replica's thread as a phase starts ("forward",
  // "backward"); throwing from it simulates a failing device.
  std::function<void(int replica, const std::string& phase)> fault_hook;
  // Note [Step graphs] (data_parallel_graphs.cpp): each replica's forward and
  // backward recorded once per batch shape and replayed as one launch. Needs the
  // loss on the replicas, dp or zero1, and no overlap.
  bool graphs = false;
};

// A batch on the host: (B, T) token ids and targets, row-major.
struct HostBatch {
  int64_t B = 0, T = 0;
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
};

struct LossStats {
  double loss_sum = 0;
  int64_t count = 0;
};

// Seconds per phase of the last step (max over devices where they run in parallel).
struct PhaseTimes {
  double scatter = 0, replicate = 0, forward = 0, gather = 0, loss = 0, backward = 0, reduce = 0,
         optimizer = 0;
  double total() const {
    return scatter + replicate + forward + gather + loss + backward + reduce + optimizer;
  }
};

// Every phase in step order with its name: code that shows or sums them all goes
// over this list, so a phase added to PhaseTimes is added here once.
struct PhaseField {
  const char* name;
  double PhaseTimes::*seconds;
};
inline constexpr PhaseField kPhaseFields[] = {
    {"scatter", &PhaseTimes::scatter}, {"replicate", &PhaseTimes::replicate},
    {"forward", &PhaseTimes::forward}, {"gather", &PhaseTimes::gather},
    {"loss", &PhaseTimes::loss},       {"backward", &PhaseTimes::backward},
    {"reduce", &PhaseTimes::reduce},   {"optimizer", &PhaseTimes::optimizer},
};
static_assert(sizeof(PhaseTimes) == std::size(kPhaseFields) * sizeof(double),
              "a PhaseTimes member is missing from kPhaseFields");

// Bytes moved between devices (and, in ddp, sent to other processes) since the
// last reset_times(): replicate = the weights sent to replicas (broadcast after a
// dp step, zero1's all-gather), reduce = everything else (gradient sums).
struct CommBytes {
  int64_t replicate = 0, reduce = 0;
};

class GradBuckets;
class ReplicaGroup;
class ShardedStorage;
class UnitShards;

class DataParallel {
 public:
  using ReplicaFactory = std::function<std::unique_ptr<Replica>(Device device, int index)>;

  DataParallel(const ReplicaFactory& factory, DataParallelOptions options);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int size() const { return static_cast<int>(replicas_.size()); }
  Replica& replica(int i) { return *replicas_[i]; }
  Replica& primary() { return *replicas_[0]; }
  const DataParallelOptions& options() const { return options_; }
  Device output_device() const { return *options_.output_device; }
  const char* collectives_name() const;

  // Rows per replica for a batch of `rows` (zeros for replicas left idle).
  std::vector<int64_t> split(int64_t rows) const;

  // The primary's parameters changed outside the engine (loaded, initialised):
  // broadcast them (fp32 master and working weights) before the next forward.
  // Not under zero3, where no replica holds them whole: use params_from_host.
  void params_changed();
  // The whole fp32 master weights from the host (every process passes the same
  // values), or to the host (every process takes part; each gets them whole).
  void params_from_host(const float* values);
  void params_to_host(float* values);
  // zero1 under mixed precision updates each replica's fp32 master only in its
  // own shard (only the bf16 working weights are all-gathered each step): this
  // all-gathers the fp32 master so that the primary's params() are whole again,
  // as a checkpoint needs. Nothing to do otherwise.
  void gather_master();

  void zero_grad();
  // Forward and backward of one (micro-)batch; gradients accumulate. The loss is
  // normalised by `normalizer`, the counted-token total of the whole step (all
  // micro-batches, all replicas). `last` marks the step's final micro-batch: with
  // --overlap its buckets are reduced while its backward runs.
  LossStats forward_backward(const HostBatch& batch, int32_t ignore_index, double normalizer,
                             bool last = true);
  // dp: gradients summed onto the primary; zero1: each replica's shard summed;
  // zero2/zero3: waits for the reductions the backward started.
  void reduce_gradients();

  // What each replica's optimizer updates after reduce_gradients().
  // dp: one; zero1: one per replica; zero2/zero3: one per replica and unit (each
  // unit is split evenly over the shards' owners; engine/parallel/zero/sharded_storage.h).
  struct Shard {
    int replica;
    int64_t begin, end;  // elements of the flat buffers
    int64_t local = 0;   // zero2/zero3: where the replica's shard buffers keep it
  };
  std::vector<Shard> shards() const;
  bool sharded() const { return options_.strategy != Strategy::dp; }
  // A shard's fp32 master weights and summed gradients, (end - begin) elements.
  Tensor shard_params(const Shard& shard);
  Tensor shard_grads(const Shard& shard);
  // The shard's bf16 working weights on its owner, for an optimizer that writes
  // them in the same pass as the master (ops::adamw_update's `working`); undefined
  // where the master is the working copy (fp32) or the store rounds it (zero3).
  Tensor shard_working(const Shard& shard);
  // One tensor per shard of shards() (its (end - begin) values, e.g. optimizer
  // state) -> the whole flat buffer on the host; across processes every rank
  // takes part and gets it whole.
  void shards_to_host(const std::vector<Tensor>& per_shard, float* out);

  // The optimizer's half of a step, after reduce_gradients(). `partial` runs on
  // every shard's own thread at once; returns the sum of its results over every
  // shard, in shard order (and, sharded across processes, over every rank): the
  // global gradient norm's sum of squares, say.
  double sum_over_shards(const std::function<double(const Shard&, Replica&)>& partial);
  // `update` runs on every shard's own thread at once and returns whether it
  // also wrote the shard's working weights (shard_working(): no second rounding
  // pass is then needed). Then the engine brings every replica up to date --
  // zero1 all-gathers the weights, zero3 rounds each owner's shard, dp
  // broadcasts before the next forward -- so no optimizer can leave them stale.
  void update_shards(const std::function<bool(const Shard&, Replica&)>& update);

  // Forward only: the loss sum and counted tokens of a batch.
  LossStats evaluate(const HostBatch& batch, int32_t ignore_index);

  // Note [Step graphs]: the forward-backward launches that replayed a recorded
  // graph, over every replica, since construction.
  int64_t graph_launches() const;

  const PhaseTimes& last_times() const { return times_; }
  void reset_times();
  CommBytes comm_bytes() const;
  // Byte counts of a replica's device (shared by replicas on one device).
  AllocatorStats memory(int replica) const;

 private:
  struct Slot;  // per-replica buffers: inputs, targets, stats, comm stream
  void replicate();
  void upload(int r, const HostBatch& batch, int64_t row0, int64_t rows, bool targets);
  LossStats step_on_replicas(const HostBatch& batch, const std::vector<int64_t>& rows,
                             int32_t ignore_index, double normalizer, bool last);
  LossStats step_faithful(const HostBatch& batch, const std::vector<int64_t>& rows,
                          int32_t ignore_index, double normalizer, bool last);
  // Note [Step graphs]: queues replica r's forward and backward as a recorded
  // graph and returns true, or returns false: the caller runs them (eagerly).
  bool run_graphed(int r, const Tensor& inputs, const Tensor& targets, int32_t ignore_index,
                   float normalizer);
  // After an eager forward and backward: the next one like it may be recorded.
  void note_eager_step(int r, const Tensor& inputs, const Tensor& targets, int32_t ignore_index,
                       float normalizer);
  std::vector<Stream*> compute_streams();
  // fn(k, replica of shard k) for every shard of `sh`, each replica's on its own
  // thread; returns when their streams are done.
  void run_on_shards_indexed(const std::vector<Shard>& sh,
                             const std::function<void(size_t, Replica&)>& fn);
  // After the update: see update_shards.
  void finish_step(bool working_written);
  // pool_->run_on, and a failing replica stops the others' waits (zero2/zero3).
  void run_guarded(const std::vector<int>& which, const std::function<void(int)>& fn);
  std::vector<Tensor> grad_buffers();
  void recover();  // after a failed step: drain every stream, re-replicate
  // Every replica's copy of shard r of `bufs` <- replica r's; waits, and counts
  // the bytes as weights sent.
  void gather_shards(const std::vector<Tensor>& bufs);
  // Over the shards' owners (this process's replicas, or the processes): every
  // owner's shards of bufs (zero1's contiguous ones, or zero2/zero3's pieces of
  // every unit) to every copy.
  void shard_all_gather(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams);
  // zero1: each owner's shard of [begin, end) <- the sum of that range.
  void shard_reduce_scatter(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                            int64_t begin, int64_t end);

  DataParallelOptions options_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ReplicaGroup> peers_;  // every sum and gather between replicas
  std::unique_ptr<GradBuckets> buckets_;
  std::unique_ptr<Stream> output_stream_;
  Tensor gathered_, gathered_targets_, output_stats_;
  std::unique_ptr<UnitShards> unit_shards_;  // zero2, zero3
  std::unique_ptr<ShardedStorage> store_;
  std::vector<int64_t> bounds_;  // shard bounds: one per replica, or per process
  int rank0_ = 0;                // the shard of replica 0 (its rank across processes)
  // What the replicas need before the next forward: nothing; the primary's
  // working weights (a dp step updated its master); the primary's whole fp32
  // master (new weights from outside); or, zero1 after a failed step, every
  // shard's master from its owner.
  // working_rounded: as working, the primary's working copy already rounded.
  enum class Sync { none, working, working_rounded, master, shards };
  Sync sync_ = Sync::master;
  bool reduced_by_buckets_ = false;
  std::atomic<bool> replica_stopped_{false};  // a replica was stopped by another's failure
  PhaseTimes times_;
  int64_t total_bytes() const;  // every counter, since construction
  int64_t bytes_base_ = 0, replicate_bytes_ = 0, weight_base_ = 0;
};

}  // namespace fanout::parallel

namespace fanout::parallel {
// A trace lane for replica i: "cpu:1 compute", or "cuda:0#1 compute" when one
// device holds several replicas.
std::string replica_lane(const std::vector<Device>& devices, int i, const std::string& what);
}  // namespace fanout::parallel
