// Parallel apply: the batch's rows scattered over the replicas, one pool task
// per replica on its own stream, logits gathered onto output_device (faithful
// dp), and recovery after a replica failed.
#include <algorithm>

#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel_slot.h"
#include "engine/parallel/grad_buckets.h"
#include "engine/parallel/scatter.h"
#include "engine/parallel/zero/sharded_storage.h"

namespace fanout::parallel {

std::string replica_lane(const std::vector<Device>& devices, int i, const std::string& what) {
  int same = static_cast<int>(std::count(devices.begin(), devices.end(), devices[i]));
  std::string name = devices[i].str();
  if (same > 1) name += '#' + std::to_string(i);
  name += ' ';
  name += what;
  return name;
}

std::vector<Stream*> DataParallel::compute_streams() {
  std::vector<Stream*> s;
  for (auto& r : replicas_) s.push_back(&r->compute_stream());
  return s;
}

std::vector<Tensor> DataParallel::grad_buffers() {
  std::vector<Tensor> g;
  for (auto& r : replicas_) g.push_back(r->grads());
  return g;
}

void DataParallel::upload(int r, const HostBatch& batch, int64_t row0, int64_t rows, bool targets) {
  Slot& slot = *slots_[r];
  Replica& rep = *replicas_[r];
  int64_t n = rows * batch.T;
  TraceScope span(replica_lane(options_.device_ids, r, "host"), "scatter");
  if (slot.capacity < n) {
    rep.compute_stream().synchronize();
    slot.inputs = Tensor::empty({n}, DType::i32, rep.device(), MemTag::data);
    slot.targets = Tensor::empty({n}, DType::i32, rep.device(), MemTag::data);
    slot.capacity = n;
  }
  tensor_upload(rep.compute_stream(), slot.inputs.view(0, {rows, batch.T}),
                batch.inputs + row0 * batch.T);
  if (targets) {
    tensor_upload(rep.compute_stream(), slot.targets.view(0, {rows, batch.T}),
                  batch.targets + row0 * batch.T);
  }
}

void DataParallel::run_guarded(const std::vector<int>& which, const std::function<void(int)>& fn) {
  pool_->run_on(which, [&](int r) {
    try {
      fn(r);
    } catch (const StepAborted&) {
      // Stopped because another replica failed: that failure is the one reported.
      replica_stopped_ = true;
    } catch (...) {
      // zero2/zero3: the others must not wait for this replica's gradients.
      if (store_) store_->abort();
      throw;
    }
  });
}

LossStats DataParallel::step_on_replicas(const HostBatch& batch, const std::vector<int64_t>& rows,
                                         int32_t ignore_index, double normalizer, bool /*last*/) {
  auto [active, row0] = scatter_layout(rows);
  run_guarded(active, [&](int r) {
    Slot& slot = *slots_[r];
    Replica& rep = *replicas_[r];
    auto t0 = Clock::now();
    upload(r, batch, row0[r], rows[r], true);
    auto t1 = Clock::now();
    slot.scatter_s = std::chrono::duration<double>(t1 - t0).count();
    if (options_.fault_hook) options_.fault_hook(r, "forward");
    Tensor inputs = slot.inputs.view(0, {rows[r], batch.T});
    Tensor targets = slot.targets.view(0, {rows[r], batch.T});
    const float norm = static_cast<float>(normalizer);
    if (run_graphed(r, inputs, targets, ignore_index, norm)) {  // Note [Step graphs]
      std::vector<float> st = tensor_to_vector<float>(rep.compute_stream(), slot.stats);
      slot.loss = {st[0], static_cast<int64_t>(st[1])};
      slot.forward_s = 0;  // one launch: its time is counted as backward's
      slot.backward_s = seconds_since(t1);
      return;
    }
    rep.forward_loss(inputs, targets, slot.stats, ignore_index);
    std::vector<float> st = tensor_to_vector<float>(rep.compute_stream(), slot.stats);
    slot.loss = {st[0], static_cast<int64_t>(st[1])};
    auto t2 = Clock::now();
    slot.forward_s = std::chrono::duration<double>(t2 - t1).count();
    if (options_.fault_hook) options_.fault_hook(r, "backward");
    rep.backward_from_loss(norm);
    rep.compute_stream().synchronize();
    slot.backward_s = seconds_since(t2);
    note_eager_step(r, inputs, targets, ignore_index, norm);
  });
  LossStats total;
  double scatter = 0, forward = 0, backward = 0;
  for (int r : active) {
    total.loss_sum += slots_[r]->loss.loss_sum;
    total.count += slots_[r]->loss.count;
    scatter = std::max(scatter, slots_[r]->scatter_s);
    forward = std::max(forward, slots_[r]->forward_s);
    backward = std::max(backward, slots_[r]->backward_s);
  }
  times_.scatter += scatter, times_.forward += forward, times_.backward += backward;
  return total;
}

LossStats DataParallel::step_faithful(const HostBatch& batch, const std::vector<int64_t>& rows,
                                      int32_t ignore_index, double normalizer, bool /*last*/) {
  int64_t T = batch.T, V = primary().vocab_size(), B = batch.B;
  auto [active, row0] = scatter_layout(rows);
  // scatter + forward to logits on every replica
  pool_->run_on(active, [&](int r) {
    Slot& slot = *slots_[r];
    Replica& rep = *replicas_[r];
    auto t0 = Clock::now();
    upload(r, batch, row0[r], rows[r], false);
    auto t1 = Clock::now();
    slot.scatter_s = std::chrono::duration<double>(t1 - t0).count();
    if (options_.fault_hook) options_.fault_hook(r, "forward");
    slot.logits = rep.forward_logits(slot.inputs.view(0, {rows[r], T}));
    rep.compute_stream().synchronize();
    slot.forward_s = seconds_since(t1);
  });
  double scatter = 0, forward = 0;
  for (int r : active) {
    scatter = std::max(scatter, slots_[r]->scatter_s);
    forward = std::max(forward, slots_[r]->forward_s);
  }
  times_.scatter += scatter, times_.forward += forward;

  // gather the logits on output_device: the (B, T, V) buffer nn.DataParallel builds
  auto t0 = Clock::now();
  Stream& out = *output_stream_;
  Device od = out.device();
  if (!gathered_.defined() || gathered_.numel() < B * T * V) {
    out.synchronize();
    gathered_ = Tensor();
    gathered_ = Tensor::empty({B * T * V}, DType::f32, od, MemTag::comm);
    gathered_targets_ = Tensor::empty({B * T}, DType::i32, od, MemTag::data);
  }
  Tensor logits = gathered_.view(0, {B, T, V});
  {
    StreamSpan span(out, "gather");
    for (int r : active) {
      tensor_copy(out, logits.slice(row0[r], row0[r] + rows[r]), slots_[r]->logits);
    }
  }
  out.synchronize();
  times_.gather += seconds_since(t0);

  // the loss on output_device, then dlogits in place
  t0 = Clock::now();
  Tensor targets = gathered_targets_.view(0, {B, T});
  tensor_upload(out, targets, batch.targets);
  std::vector<float> st;
  {
    StreamSpan span(out, "loss");
    // The model owns its loss wherever it runs: the primary's, on output_device.
    primary().logits_loss(out, logits, targets, output_stats_, ignore_index);
    st = tensor_to_vector<float>(out, output_stats_);
    primary().logits_loss_backward(out, logits, targets, ignore_index,
                                   static_cast<float>(normalizer));
  }
  out.synchronize();
  times_.loss += seconds_since(t0);

  // scatter dlogits back (into each replica's logits buffer) and run backward
  run_guarded(active, [&](int r) {
    Slot& slot = *slots_[r];
    Replica& rep = *replicas_[r];
    auto t1 = Clock::now();
    if (options_.fault_hook) options_.fault_hook(r, "backward");
    tensor_copy(rep.compute_stream(), slot.logits, logits.slice(row0[r], row0[r] + rows[r]));
    rep.backward_from_logits(slot.logits);
    rep.compute_stream().synchronize();
    slot.backward_s = seconds_since(t1);
  });
  double backward = 0;
  for (int r : active) backward = std::max(backward, slots_[r]->backward_s);
  times_.backward += backward;
  return {st[0], static_cast<int64_t>(st[1])};
}

void DataParallel::recover() {
  if (buckets_) buckets_->disarm();
  auto drain = [](Stream& s) {
    try {
      s.synchronize();
    } catch (...) {
    }
  };
  for (auto& r : replicas_) drain(r->compute_stream());
  for (auto& s : slots_) drain(*s->comm);
  if (output_stream_) drain(*output_stream_);
  if (store_) store_->reset();
  reduced_by_buckets_ = false;
  for (auto& s : slots_) {  // recorded afresh (Note [Step graphs])
    s->graph.reset();
    s->eager_key = {};
  }
  // Replicas are re-synchronised: from the primary, or (zero1, zero2) from each
  // shard's owner; zero3's shards are the weights, untouched by forward and backward.
  if (options_.strategy == Strategy::zero3) {
    sync_ = Sync::none;
  } else if (sync_ != Sync::master) {
    sync_ = options_.strategy == Strategy::dp ? Sync::master : Sync::shards;
  }
}

}  // namespace fanout::parallel
