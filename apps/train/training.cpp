#include "apps/train/training.h"

#include "engine/core/check.h"

namespace fanout::train {

void training_options_set_mode(TrainingOptions& o, const parallel::Mode& mode) {
  o.strategy = mode.strategy;
  o.loss_on = mode.loss_on;
  o.overlap = mode.overlap;
}

Training::Training(TrainingOptions options, const InitialWeights& initial)
    : options_(std::move(options)), layout_(options_.config) {
  parallel::DataParallelOptions dpo;
  dpo.device_ids = options_.devices;
  dpo.output_device = options_.output_device;
  dpo.chunk_sizes = options_.chunk_sizes;
  dpo.strategy = options_.strategy;
  dpo.loss_on = options_.loss_on;
  dpo.overlap = options_.overlap;
  dpo.bucket_mb = options_.bucket_mb;
  dpo.grad_comm = options_.grad_comm;
  dpo.process_group = options_.group;
  dpo.fault_hook = options_.fault_hook;
  const std::vector<Device>& ids = options_.devices;
  auto factory = [&](Device d, int i) {
    return std::make_unique<models::LlamaModel>(
        options_.config, d, parallel::replica_lane(ids, i, "compute"), options_.working);
  };
  dp_ = std::make_unique<parallel::DataParallel>(factory, dpo);
  const bool zero3 = options_.strategy == parallel::Strategy::zero3;
  if (initial.load) {
    FANOUT_ASSERT(!zero3, "zero3 keeps no whole model to load into");
    initial.load(primary());
    dp_->params_changed();
  } else if (initial.values) {
    dp_->params_from_host(initial.values);
  } else {
    dp_->params_from_host(models::LlamaModel::random_params(options_.config, initial.seed).data());
  }
  if (options_.group && !zero3) {
    // Every rank starts from rank 0's weights (zero3's ranks each load their own
    // shard of the same values).
    models::LlamaModel& p = primary();
    options_.group->broadcast(p.params(), 0, p.compute_stream());
    p.compute_stream().synchronize();
    dp_->params_changed();
  }
  opt_ = std::make_unique<Optimizer>(*dp_, decay_runs(layout_), options_.adam);
}

models::LlamaModel& Training::primary() {
  return dynamic_cast<models::LlamaModel&>(dp_->primary());
}

parallel::LossStats Training::forward_backward(const std::vector<parallel::HostBatch>& micro,
                                               double normalizer) {
  dp_->zero_grad();
  parallel::LossStats total;
  for (size_t k = 0; k < micro.size(); ++k) {
    parallel::LossStats st =
        dp_->forward_backward(micro[k], models::kIgnoreIndex, normalizer, k + 1 == micro.size());
    total.loss_sum += st.loss_sum;
    total.count += st.count;
  }
  return total;
}

parallel::LossStats Training::forward_backward(const parallel::HostBatch& batch,
                                               double normalizer) {
  return forward_backward(std::vector<parallel::HostBatch>{batch}, normalizer);
}

double Training::optimizer_step(int64_t step, float lr, double clip) {
  return opt_->step(step, lr, clip);
}

Training::StepResult Training::step(const parallel::HostBatch& batch, double normalizer,
                                    int64_t step, float lr, double clip) {
  StepResult r;
  r.loss = forward_backward(batch, normalizer);
  reduce_gradients();
  r.grad_norm = optimizer_step(step, lr, clip);
  return r;
}

std::vector<float> Training::params_to_host() {
  std::vector<float> out(layout_.total());
  dp_->params_to_host(out.data());
  return out;
}

}  // namespace fanout::train
