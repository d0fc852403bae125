#include "apps/walkthrough/walkthrough_pipeline.h"

#include <algorithm>
#include <cmath>

#include "apps/data/data_loader.h"
#include "apps/presentation/trace_timeline.h"
#include "apps/train/train_pipeline.h"
#include "apps/train/training.h"
#include "apps/walkthrough/walkthrough_narrator.h"
#include "apps/walkthrough/walkthrough_prose.h"
#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/parallel/pipeline/balance.h"

namespace fanout::walkthrough::walk {

namespace {

// One traced step of a pipeline over `devices` under `schedule`, from the modes'
// weights (seed 1), then o.timed_steps untraced ones.
WalkthroughPipeline pipeline_step(const WalkthroughOptions& o, const data::TokenData& data,
                                  const std::vector<Device>& devices,
                                  parallel::PipeSchedule schedule) {
  WalkthroughPipeline r;
  r.schedule = parallel::pipe_schedule_name(schedule);
  r.devices = devices;
  const int K = static_cast<int>(devices.size());
  train::TrainingOptions options;
  options.config = o.config;
  options.devices = devices;
  options.stages = K;
  options.pipe_schedule = schedule;
  options.micro_batches = static_cast<int>(std::min<int64_t>(2 * K, o.batch_size));
  const std::vector<double> costs =
      train::pipeline_unit_costs(o.config, "params", devices[0], 1, o.seq_len, DType::f32);
  options.cut = parallel::balance_cut(costs, K);
  r.stages = K, r.micro_batches = options.micro_batches;
  r.cut = parallel::describe_cut(options.cut, static_cast<int>(o.config.num_hidden_layers), costs);
  std::vector<AllocatorStats> before;
  std::vector<Device> distinct;
  for (const Device& d : devices)
    if (std::find(distinct.begin(), distinct.end(), d) == distinct.end()) distinct.push_back(d);
  for (const Device& d : distinct) {
    before.push_back(allocator_for(d).stats());
    allocator_for(d).reset_peak();
  }
  {
    train::Training training(options, train::InitialWeights{});
    data::DataLoader loader(data, o.batch_size, o.seq_len, true, false, 0, models::kIgnoreIndex);
    data::Batch b = loader.next();
    parallel::HostBatch hb{b.B, b.T, b.inputs.data(), b.targets.data()};
    Trace& trace = Trace::global();
    const bool was = trace.enabled();
    trace.set_enabled(true);
    const int64_t t0 = trace.now_us();
    const train::Training::StepResult done =
        training.step(hb, static_cast<double>(b.counted()), 1, options.adam.lr, 1.0);
    r.last.t0_us = t0, r.last.t1_us = trace.now_us();
    r.last.spans = spans_between(r.last.t0_us, r.last.t1_us);
    r.bubble_measured =
        presentation::trace_pipeline_bubble(r.last.spans, r.last.t0_us, r.last.t1_us);
    r.loss = done.loss.loss_sum / static_cast<double>(done.loss.count);
    const parallel::Pipeline& pipe = training.pipeline();
    const parallel::ScheduleSim sim = parallel::simulate_schedule(pipe.schedule());
    r.grid = parallel::schedule_grid(pipe.schedule(), sim);
    r.bubble_schedule = sim.bubble;
    r.boundary_bytes = pipe.bytes_moved();
    r.memory = presentation::device_peaks_above(distinct, before);
    r.timed_ms = time_steps(o, training, loader, 2);
    trace.set_enabled(was);
  }
  return r;
}

}  // namespace

WalkthroughPipeline walkthrough_pipeline(const WalkthroughOptions& o, const data::TokenData& data,
                                         double dp_loss, int index, std::ostream& out,
                                         std::vector<WalkthroughPipeline>& schedules) {
  // One stage per device, as many as the model has units; two on one device.
  const int units = static_cast<int>(o.config.num_hidden_layers) + 2;
  std::vector<Device> devices(o.devices.begin(),
                              o.devices.begin() + std::min<size_t>(o.devices.size(), units));
  if (devices.size() == 1) devices.push_back(devices[0]);
  const size_t at = schedules.size();
  for (parallel::PipeSchedule sched :
       {parallel::PipeSchedule::gpipe, parallel::PipeSchedule::one_f_one_b,
        parallel::PipeSchedule::zb1}) {
    schedules.push_back(pipeline_step(o, data, devices, sched));
    schedules.back().dp_loss = dp_loss;
  }
  const WalkthroughPipeline& r = schedules[at + 1];
  Prose p(out, o.color, o.width);
  const int K = r.stages, M = r.micro_batches;
  out << "\n";
  p.title(strf("%d. pipeline: the model cut into stages (--pp %d)", index, K));
  p.more(
      strf("Data parallelism keeps the whole model on every device. A pipeline cuts it into "
           "stages, one per device (%s), and streams the batch through them in %d "
           "micro-batches: fanout train --devices %s --pp %d",
           devices_str(devices).c_str(), M, devices_str(devices).c_str(), K));
  p.line("cut", r.cut + " (--balance params: the weights each stage holds)");
  p.line("schedule",
         strf("1F1B: after its warm-up forwards each stage runs a micro-batch's backward (B) as "
              "soon as the stage after it has sent that gradient back, so stage s keeps at most "
              "min(%d - s, %d) micro-batches of activations. With equal stage costs (F 1, B 2), "
              "'.' a stage waiting:",
              K, M));
  std::string grid = r.grid;
  for (size_t at = 0; (at = grid.find('\n', at)) != std::string::npos && at + 1 < grid.size();)
    grid.insert(++at, "    ");
  out << "    " << grid << (grid.empty() || grid.back() == '\n' ? "" : "\n");
  p.line("bubble",
         strf("the share of the stages' time spent waiting: %.0f%% for this schedule, (K - 1) / "
              "(M + K - 1); measured from this step's trace: %.0f%%. More micro-batches shrink "
              "it; --pp-schedule zb1 fills it with the weight gradients",
              100 * r.bubble_schedule, 100 * r.bubble_measured));
  p.line("moved", strf("%lld bytes crossed stage boundaries: each micro-batch's hidden state "
                       "forward and its gradient back (rows x %lld tokens x %lld x 4 bytes "
                       "each way), not the weights",
                       static_cast<long long>(r.boundary_bytes), static_cast<long long>(o.seq_len),
                       static_cast<long long>(o.config.hidden_size)));
  p.line("schedules",
         strf("the same step under --pp-schedule gpipe (every forward, then every backward) "
              "measured a bubble of %.0f%% (schedule %.0f%%), and under zb1 (backward split into "
              "its input and weight gradients, the latter filling the waits) %.0f%% (schedule "
              "%.0f%%); the losses %.5f and %.5f equal 1F1B's",
              100 * schedules[at].bubble_measured, 100 * schedules[at].bubble_schedule,
              100 * schedules[at + 2].bubble_measured, 100 * schedules[at + 2].bubble_schedule,
              schedules[at].loss, schedules[at + 2].loss));
  p.split_model_end(r.loss, dp_loss, "the same model, computed in pieces", r.memory);
  return r;
}

}  // namespace fanout::walkthrough::walk
