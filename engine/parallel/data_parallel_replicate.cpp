// Replicate: the weights the replicas compute with, brought up to date from
// the primary (dp) or from every shard's owner (zero1, zero2) before a forward,
// and the whole weights to and from the host.
#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel_slot.h"
#include "engine/parallel/zero/sharded_storage.h"

namespace fanout::parallel {

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
    peers_->broadcast(bufs, streams, 0, P);
  } else {
    // Every replica gets the whole fp32 master (a zero1 shard owner updates its
    // own part of it) and rounds its own working copy.
    for (auto& r : replicas_) bufs.push_back(r->params());
    if (sync_ == Sync::master) {
      peers_->broadcast(bufs, streams, 0, P);
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

void DataParallel::gather_master() {
  if (options_.strategy == Strategy::dp || options_.strategy == Strategy::zero3) return;
  if (primary().working_params().raw() == primary().params().raw()) return;
  // New weights are whole in the primary's master until the next forward sends
  // them out; the replicas' shards are older.
  if (sync_ == Sync::master) return;
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

}  // namespace fanout::parallel
