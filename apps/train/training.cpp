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
  if (!options_.cut.empty()) {
    make_pipeline(initial);
    return;
  }
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
  dpo.graphs = options_.graphs;
  const std::vector<Device>& ids = options_.devices;
  auto factory = [&](Device d, int i) {
    auto m = std::make_unique<models::LlamaModel>(
        options_.config, d, parallel::replica_lane(ids, i, "compute"), options_.working);
    m->set_recompute(options_.recompute);
    return m;
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
  opt_ = std::make_unique<Optimizer>(*dp_, decay_runs(layout_), options_.adam,
                                     OptimizerOffload{options_.offload_optimizer});
}

// The stages of a pipeline: replica d's stage s, tensor rank t on
// devices[(d * stages + s) * tensor + t], its compute stream's trace lane named
// for all three.
void Training::make_pipeline(const InitialWeights& initial) {
  FANOUT_CHECK(!options_.offload_optimizer,
               "--offload optimizer works with --strategy dp, zero1, zero2 and zero3; not with "
               "--pp or --tp");
  FANOUT_CHECK(!options_.graphs,
               "--graphs on records each replica's forward and backward; not with --pp or --tp");
  FANOUT_ASSERT(!initial.load && !options_.group, "a pipeline loads whole weights, in one process");
  parallel::PipelineOptions po;
  po.devices = options_.devices;
  po.stages = options_.stages;
  po.schedule = options_.pipe_schedule;
  po.micro_batches = options_.micro_batches;
  po.cut = options_.cut;
  po.strategy = options_.strategy;
  po.overlap = options_.overlap;
  po.tensor = options_.tensor;
  po.grad_comm = options_.grad_comm;
  const int T = options_.tensor;
  auto factory = [&](const parallel::StageSpot& at) {
    std::string lane = at.device.str() + " stage " + std::to_string(at.stage);
    if (T > 1) lane += " tp " + std::to_string(at.tensor_rank);
    if (static_cast<int>(options_.devices.size()) > options_.stages * T)
      lane += " replica " + std::to_string(at.replica);
    auto m = std::make_unique<models::LlamaModel>(
        options_.config, at.device, lane, options_.working,
        models::TensorShard{at.tensor_rank, T, at.peers, options_.sequence_parallel});
    m->set_stage(at.first_unit, at.last_unit);
    m->set_recompute(options_.recompute);
    return m;
  };
  pipe_ = std::make_unique<parallel::Pipeline>(factory, po);
  if (initial.values) {
    pipe_->params_from_host(initial.values);
  } else {
    pipe_->params_from_host(
        models::LlamaModel::random_params(options_.config, initial.seed).data());
  }
  const models::LlamaLayout shard(T > 1 ? models::tensor_shard_config(options_.config, T)
                                        : options_.config);
  opt_ = std::make_unique<Optimizer>(*pipe_, decay_runs(shard, T), options_.adam);
}

parallel::DataParallel& Training::engine() {
  FANOUT_ASSERT(dp_, "the data-parallel engine of a pipelined run");
  return *dp_;
}

parallel::Pipeline& Training::pipeline() {
  FANOUT_ASSERT(pipe_, "the pipeline of a data-parallel run");
  return *pipe_;
}

bool Training::sharded_across_processes() const {
  return dp_ && options_.group != nullptr && dp_->sharded();
}

models::LlamaModel& Training::primary() {
  return dynamic_cast<models::LlamaModel&>(engine().primary());
}

void Training::reduce_gradients() {
  if (pipe_) return pipe_->reduce_gradients();
  dp_->reduce_gradients();
}

parallel::LossStats Training::evaluate(const parallel::HostBatch& batch) {
  if (pipe_) return pipe_->evaluate(batch, models::kIgnoreIndex);
  return dp_->evaluate(batch, models::kIgnoreIndex);
}

parallel::LossStats Training::forward_backward(const std::vector<parallel::HostBatch>& micro,
                                               double normalizer) {
  if (pipe_) pipe_->zero_grad();
  if (dp_) dp_->zero_grad();
  parallel::LossStats total;
  for (size_t k = 0; k < micro.size(); ++k) {
    parallel::LossStats st = pipe_ ? pipe_->forward_backward(micro[k], models::kIgnoreIndex,
                                                             normalizer, k + 1 == micro.size())
                                   : dp_->forward_backward(micro[k], models::kIgnoreIndex,
                                                           normalizer, k + 1 == micro.size());
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
  if (pipe_) pipe_->params_to_host(out.data());
  if (dp_) dp_->params_to_host(out.data());
  return out;
}

}  // namespace fanout::train
