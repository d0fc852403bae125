#include "apps/bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>

#include "apps/presentation/text_format.h"
#include "apps/presentation/text_table.h"
#include "apps/presentation/trace_timeline.h"
#include "apps/train/memory_check.h"
#include "apps/train/train_options.h"
#include "apps/train/train_pipeline.h"
#include "apps/train/training.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "engine/core/flat.h"
#include "engine/core/trace.h"
#include "engine/parallel/pipeline/balance.h"
#include "models/llama_model.h"
#include "ops/attention.h"
#include "ops/matmul.h"

namespace fanout::bench {

using presentation::strf;

namespace {
using Clock = std::chrono::steady_clock;

parallel::PhaseTimes& operator+=(parallel::PhaseTimes& a, const parallel::PhaseTimes& b) {
  for (const parallel::PhaseField& f : parallel::kPhaseFields) a.*f.seconds += b.*f.seconds;
  return a;
}
parallel::PhaseTimes scaled(parallel::PhaseTimes t, double s) {
  for (const parallel::PhaseField& f : parallel::kPhaseFields) t.*f.seconds *= s;
  return t;
}
}  // namespace

std::vector<parallel::Mode> bench_modes_parse(const std::string& list) {
  std::vector<parallel::Mode> out;
  std::stringstream ss(list == "all" ? "" : list);
  if (list == "all") out = parallel::modes();
  for (std::string name; std::getline(ss, name, ',');) {
    const std::string canonical = name == "dp-replicas" ? "dp" : name;
    const parallel::Mode* known = parallel::mode_find(canonical);
    FANOUT_CHECK(known != nullptr, "--modes: unknown mode '", name, "' (choose from ",
                 parallel::mode_names(), ", or all; dp-replicas is another name for dp)");
    // dp and dp-replicas are one mode: one row.
    bool seen = std::any_of(out.begin(), out.end(),
                            [&](const parallel::Mode& m) { return m.name == canonical; });
    if (!seen) out.push_back(*known);
  }
  FANOUT_CHECK(!out.empty(), "--modes is empty (choose from ", parallel::mode_names(), ", or all)");
  return out;
}

namespace {

// One more step of a pipeline under the trace: its bubble, and the schedule's.
void pipeline_bubble(train::Training& training, const parallel::HostBatch& batch, int64_t n,
                     int64_t step, presentation::BenchResult& result) {
  Trace& trace = Trace::global();
  const bool was = trace.enabled();
  trace.set_enabled(true);
  const int64_t t0 = trace.now_us();
  training.step(batch, static_cast<double>(n), step, training.options().adam.lr, 1.0);
  const int64_t t1 = trace.now_us();
  result.bubble = presentation::trace_pipeline_bubble(trace.spans(), t0, t1);
  if (!was) trace.set_enabled(false), trace.clear();
  const parallel::Pipeline& pipe = training.pipeline();
  result.stages = pipe.stages();
  result.micro_batches = pipe.micro_batches();
  result.bubble_schedule = parallel::simulate_schedule(pipe.schedule()).bubble;
}

// The warm-up and timed steps of one mode (and the profiled one), their figures
// into `result`. A pipeline's phases: the schedule (forwards and backwards
// interleave) as forward, the gradient sums and the update as optimizer.
void timed_steps(const BenchSetup& setup, train::Training& training,
                 const parallel::HostBatch& batch, int64_t n, const std::vector<Device>& distinct,
                 bool schedule, presentation::BenchResult& result) {
  parallel::DataParallel* dp = training.pipelined() ? nullptr : &training.engine();
  const float lr = training.options().adam.lr;
  // Each timed step's seconds: their median is the mode's figure, their quartiles
  // its spread. Timed steps go on until there are `steps` and `min_seconds` of them.
  std::vector<double> timed;
  double elapsed = 0;
  parallel::PhaseTimes total;
  parallel::CommBytes bytes;
  int s = 0;
  for (bool more = true; more; ++s) {
    if (s == setup.warmup) {
      for (const Device& d : distinct) allocator_for(d).reset_peak();
      host_allocator().reset_peak();
    }
    if (dp) dp->reset_times();
    const int64_t moved = dp ? 0 : training.pipeline().bytes_moved();
    auto t0 = Clock::now();
    parallel::LossStats st = training.step(batch, static_cast<double>(n), s + 1, lr, 1.0).loss;
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const bool is_timed = s >= setup.warmup;
    if (is_timed && dp) {
      timed.push_back(secs), elapsed += secs, total += dp->last_times();
      parallel::CommBytes b = dp->comm_bytes();
      bytes.replicate += b.replicate, bytes.reduce += b.reduce;
    } else if (is_timed) {
      const double schedule_s = training.pipeline().last_step_seconds();
      timed.push_back(secs), elapsed += secs;
      total.forward += schedule_s, total.optimizer += std::max(0.0, secs - schedule_s);
      bytes.reduce += training.pipeline().bytes_moved() - moved;
    }
    // Whether this rank wants another step; summed, so every ddp rank stops
    // after the same step (a rank that stopped alone would leave the others
    // waiting in a collective).
    const bool want =
        !is_timed || static_cast<int>(timed.size()) < setup.steps || elapsed < setup.min_seconds;
    double sums[3] = {st.loss_sum, static_cast<double>(st.count), want ? 1.0 : 0.0};
    if (setup.group) setup.group->all_reduce_host(sums, 3);
    result.last_loss = sums[0] / sums[1];
    more = sums[2] > 0;
  }
  if (!dp) result.tensor = training.pipeline().tensor();
  // A pipeline row's bubble (tensor parallelism alone has no schedule to speak of).
  if (!dp && schedule) pipeline_bubble(training, batch, n, s + 1, result), ++s;
  // The profiled step: twice, the first filling the profile's event pool (which
  // would otherwise be made inside the step it measures).
  for (int p = 0; setup.profile_kernels && p < 2; ++p) {
    op_profile_start();
    auto t0 = Clock::now();
    training.step(batch, static_cast<double>(n), s + p + 1, lr, 1.0);
    result.kernels = op_profile_stop();
    result.kernels_step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const double k = static_cast<double>(timed.size());
  result.comm = {bytes.replicate / static_cast<int64_t>(timed.size()),
                 bytes.reduce / static_cast<int64_t>(timed.size())};
  result.step = presentation::step_times_summarize(timed);
  result.step_s = result.step.median;
  result.tokens_per_s = static_cast<double>(n) / result.step_s;  // the global batch
  result.phases = scaled(total, 1.0 / k);
}

}  // namespace

presentation::BenchResult bench_mode(const BenchSetup& setup, const parallel::Mode& mode) {
  const models::LlamaConfig& config = setup.config;
  FANOUT_CHECK(setup.seq_len <= config.max_position_embeddings, "--seq-len ", setup.seq_len,
               " exceeds max_position_embeddings ", config.max_position_embeddings);
  FANOUT_CHECK(setup.batch_size > 0 && setup.seq_len > 0 && setup.steps > 0 && setup.warmup >= 0,
               "benchmark sizes must be positive");
  FANOUT_CHECK(setup.steps <= std::numeric_limits<int>::max() - setup.warmup,
               "--steps + --warmup is too large");
  FANOUT_CHECK(std::isfinite(setup.min_seconds) && setup.min_seconds >= 0,
               "--min-seconds must be 0 or more, got ", setup.min_seconds);
  // ddp: this process holds all token ids but only its rows' activations (its
  // share is a lower bound of the whole, as the check wants).
  // A pipeline's stages hold one model between them (counted on one device) and
  // at the least one micro-batch's activations.
  const int64_t my_rows = std::max<int64_t>(1, setup.ddp.rows_of(setup.batch_size).second);
  // Grid rows: K stages (pp-tp: 2 when the devices are even), each split over
  // the most tensor ranks that divide its devices and the model (tp), the rest
  // data-parallel replicas.
  const int64_t N = static_cast<int64_t>(setup.devices.size());
  const bool grid = mode.pipeline || mode.tensor;
  const int64_t K = !mode.pipeline     ? 1
                    : mode.stages == 0 ? N
                                       : (N % mode.stages == 0 ? mode.stages : 1);
  int64_t T = 1;
  for (int64_t t = N / K; mode.tensor && t > 1 && T == 1; --t) {
    if ((N / K) % t == 0 && config.num_attention_heads % t == 0 &&
        config.num_key_value_heads % t == 0 && config.intermediate_size % t == 0)
      T = t;
  }
  const int64_t micro_batches = mode.pipeline ? std::min(2 * K, setup.batch_size) : 1;
  train::memory_check_fits(config, grid ? std::vector<Device>{setup.devices[0]} : setup.devices,
                           {my_rows,
                            grid ? (my_rows + micro_batches - 1) / micro_batches
                                 : train::memory_largest_share(my_rows, N),
                            setup.seq_len, mode.loss_on == parallel::LossOn::output, true});
  // Synthetic tokens (all counted): the timing does not depend on their values.
  const int64_t n = size_mul("--batch-size x --seq-len tokens", {setup.batch_size, setup.seq_len});
  std::vector<int32_t> inputs(n), targets(n);
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(config.vocab_size) - 1);
  for (int64_t i = 0; i < n; ++i) inputs[i] = tok(rng), targets[i] = tok(rng);
  auto [first, rows] = setup.ddp.rows_of(setup.batch_size);  // all rows unless ddp
  parallel::HostBatch batch{rows, setup.seq_len, inputs.data() + first * setup.seq_len,
                            targets.data() + first * setup.seq_len};

  train::TrainingOptions options;
  options.config = config;
  options.devices = setup.devices;
  train::training_options_set_mode(options, mode);
  options.bucket_mb = setup.bucket_mb;
  options.group = setup.group;
  options.working = setup.working;
  options.grad_comm = setup.grad_comm;
  options.recompute = setup.recompute;
  options.offload_optimizer = setup.offload;
  FANOUT_CHECK(!setup.offload || !(grid || mode.processes),
               "--offload optimizer works with dp, overlap, zero1, zero2 and zero3");
  if (grid) {  // K stages, the cut balanced by parameters, each on T devices
    FANOUT_CHECK(!setup.group, "a pipeline runs in one process");
    options.stages = static_cast<int>(K);
    options.tensor = static_cast<int>(T);
    options.pipe_schedule = mode.pipeline.value_or(parallel::PipeSchedule::one_f_one_b);
    options.micro_batches = static_cast<int>(micro_batches);
    options.cut =
        parallel::balance_cut(train::pipeline_unit_costs(config, "params", setup.devices[0], 1,
                                                         setup.seq_len, setup.working),
                              static_cast<int>(K));
  }
  // As train resolves --graphs auto, for this row's shape.
  options.graphs =
      setup.graphs == "on" ||
      (setup.graphs == "auto" && train::all_cuda(setup.devices) &&
       train::graphs_fit(options.stages, options.tensor, parallel::loss_on_name(options.loss_on),
                         options.overlap,
                         mode.processes ? "ddp" : parallel::strategy_name(mode.strategy)));
  const std::vector<Device>& ids = setup.devices;
  // Each device once, in --devices order: peaks[0] is the primary's.
  std::vector<Device> distinct;
  for (const Device& d : ids)
    if (std::find(distinct.begin(), distinct.end(), d) == distinct.end()) distinct.push_back(d);
  presentation::BenchResult result;
  result.mode = mode.name;
  result.devices = devices_str(ids);
  result.precision = setup.working == DType::bf16 ? "bf16" : "fp32";
  result.grad_comm = setup.grad_comm == DType::bf16 ? "bf16" : "fp32";
  {
    // Every process computes the same initial values from the seed; zero3
    // keeps only shards, so no model is initialised whole.
    train::Training training(options, train::InitialWeights{});
    timed_steps(setup, training, batch, n, distinct, mode.pipeline.has_value(), result);
    result.peaks = presentation::device_peaks(distinct);
    result.host_bytes = host_allocator().stats().total.peak;
  }
  return result;
}

// --- the memory table ---------------------------------------------------------

const std::vector<MemTag>& bench_memory_kinds() {
  static const std::vector<MemTag> kinds = {MemTag::params, MemTag::grads, MemTag::optimizer,
                                            MemTag::activations, MemTag::comm};
  return kinds;
}

const presentation::BenchResult* bench_memory_baseline(
    const std::vector<presentation::BenchResult>& results, const std::string& precision) {
  for (const presentation::BenchResult& r : results)
    if (r.mode == "dp" && r.precision == precision && !r.peaks.empty()) return &r;
  return nullptr;
}

namespace {
size_t largest_device(const presentation::BenchResult& r) {
  size_t at = 0;
  for (size_t i = 1; i < r.peaks.size(); ++i)
    if (r.peaks[i].peak_bytes > r.peaks[at].peak_bytes) at = i;
  return at;
}
std::string label_of(const presentation::BenchResult& r) {
  return r.mode + (r.precision == "bf16" ? " bf16" : "");
}
}  // namespace

double bench_memory_ratio(const presentation::BenchResult& r,
                          const presentation::BenchResult& base) {
  if (r.peaks.empty() || base.peaks.empty() || base.peaks[0].peak_bytes == 0) return 0;
  return static_cast<double>(r.peaks[largest_device(r)].peak_bytes) /
         static_cast<double>(base.peaks[0].peak_bytes);
}

std::string bench_memory_table(const std::vector<presentation::BenchResult>& rows, size_t width) {
  // --wide: the kinds in allocator order, then the total and the ratio; narrower,
  // the total and the ratio first, so that the first block holds what a row is about.
  presentation::TextTable t;
  t.keys = 2;
  t.columns = {{"mode", width ? 0u : 24u, true}, {"device", width ? 0u : 16u, true}};
  std::vector<presentation::TextColumn> kinds;
  for (MemTag tag : bench_memory_kinds()) kinds.push_back({mem_tag_name(tag), width ? 0u : 11u});
  // The host's column: its peak (offloaded optimizer state) on a result's first row.
  const std::vector<presentation::TextColumn> totals = {
      {"total", width ? 0u : 11u}, {" vs dp", 0, true}, {"host", width ? 0u : 11u}};
  t.columns.insert(t.columns.end(), width ? totals.begin() : kinds.begin(),
                   width ? totals.end() : kinds.end());
  t.columns.insert(t.columns.end(), width ? kinds.begin() : totals.begin(),
                   width ? kinds.end() : totals.end());
  std::vector<std::string> precisions;
  for (const presentation::BenchResult& r : rows) {
    if (std::find(precisions.begin(), precisions.end(), r.precision) == precisions.end())
      precisions.push_back(r.precision);
    const presentation::BenchResult* base = bench_memory_baseline(rows, r.precision);
    const size_t top = largest_device(r);
    for (size_t i = 0; i < r.peaks.size(); ++i) {
      const presentation::DevicePeak& p = r.peaks[i];
      std::vector<std::string> by_kind;
      for (MemTag tag : bench_memory_kinds()) by_kind.push_back(bytes_str(p.tag(tag)));
      std::string ratio = i != top ? ""
                          : base   ? strf(" %.2fx", bench_memory_ratio(r, *base))
                                   : " -";
      std::vector<std::string> cells = {i ? "" : label_of(r), p.device};
      const std::vector<std::string> total = {bytes_str(p.peak_bytes), ratio,
                                              i ? "" : bytes_str(r.host_bytes)};
      cells.insert(cells.end(), width ? total.begin() : by_kind.begin(),
                   width ? total.end() : by_kind.end());
      cells.insert(cells.end(), width ? by_kind.begin() : total.begin(),
                   width ? by_kind.end() : total.end());
      t.rows.push_back({cells, ""});
    }
  }
  std::string out = presentation::text_table_render(t, width);
  for (const std::string& precision : precisions) {
    const presentation::BenchResult* base = bench_memory_baseline(rows, precision);
    out += presentation::text_wrap(
        base ? strf("vs dp (%s): a mode's largest device total / dp's %s total, %s (whole "
                    "weights, gradients and AdamW state)",
                    precision.c_str(), base->peaks[0].device.c_str(),
                    bytes_str(base->peaks[0].peak_bytes).c_str())
             : strf("vs dp (%s): no ratio, dp did not run in %s", precision.c_str(),
                    precision.c_str()),
        width, "  ");
  }
  return out;
}

nlohmann::json bench_phases_json(const parallel::PhaseTimes& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const parallel::PhaseField& f : parallel::kPhaseFields) j[f.name] = p.*f.seconds;
  return j;
}

nlohmann::json bench_row_json(const presentation::BenchResult& r, double base_tps,
                              const std::vector<presentation::BenchResult>& ran) {
  if (!r.failed.empty()) {
    return {
        {"mode", r.mode}, {"precision", r.precision}, {"status", "failed"}, {"reason", r.failed}};
  }
  nlohmann::json peaks = nlohmann::json::object(), by_kind = nlohmann::json::array();
  for (const auto& p : r.peaks) peaks[p.device] = p.peak_bytes;
  for (const auto& p : r.peaks) by_kind.push_back(presentation::device_peak_json(p));
  const presentation::BenchResult* mem_base = bench_memory_baseline(ran, r.precision);
  return {{"mode", r.mode},
          {"status", "ok"},
          {"devices", r.devices},
          {"precision", r.precision},
          {"grad_comm", r.grad_comm},
          {"comm_bytes_per_step", {{"replicate", r.comm.replicate}, {"reduce", r.comm.reduce}}},
          {"tokens_per_s", r.tokens_per_s},
          {"speedup", base_tps > 0 ? nlohmann::json(r.tokens_per_s / base_tps) : nlohmann::json()},
          {"step_s", r.step_s},
          {"step_s_q1", r.step.q1},
          {"step_s_q3", r.step.q3},
          {"spread", presentation::step_times_spread(r.step)},
          {"timed_steps", r.step.samples},
          {"phases_s", bench_phases_json(r.phases)},
          {"peak_bytes", peaks},
          {"peak_bytes_by_kind", by_kind},
          {"host_bytes", r.host_bytes},
          // largest device total / dp's primary total in this precision
          {"memory_vs_dp",
           mem_base ? nlohmann::json(bench_memory_ratio(r, *mem_base)) : nlohmann::json()},
          {"pipeline", r.stages > 0 ? nlohmann::json{{"stages", r.stages},
                                                     {"micro_batches", r.micro_batches},
                                                     {"bubble", r.bubble},
                                                     {"bubble_schedule", r.bubble_schedule}}
                                    : nlohmann::json()},
          {"tensor", r.tensor}};
}

std::vector<std::string> bench_bubble_lines(const std::vector<presentation::BenchResult>& ran) {
  std::vector<std::string> out;
  for (const presentation::BenchResult& r : ran) {
    if (r.stages == 0) continue;
    if (out.empty()) {
      out.push_back(
          "pp rows: forward is the whole schedule (forwards and backwards interleave), "
          "optimizer the gradient sums and the update; comm the stage-boundary buffers");
    }
    out.push_back(
        strf("%s%s: %d stage%s, %d micro-batches: bubble %.0f%% of the stages' time, "
             "measured from a traced step (the schedule's own: %.0f%% with equal "
             "stage costs)",
             r.mode.c_str(), r.precision == "bf16" ? " bf16" : "", r.stages,
             r.stages == 1 ? "" : "s", r.micro_batches, 100 * r.bubble, 100 * r.bubble_schedule));
  }
  return out;
}

std::vector<OpBenchRow> bench_ops(const models::LlamaConfig& c, Device device, int64_t batch,
                                  int64_t seq_len, int repeats, DType dtype) {
  FANOUT_CHECK(batch > 0 && seq_len > 0 && repeats > 0, "sizes must be positive");
  FANOUT_ASSERT(dtype == DType::f32 || dtype == DType::bf16, "bench_ops: ", dtype_name(dtype));
  // The largest buffers below: x, y, dx and w, dw of lm_head, and q, k, v, o, dq.
  const int64_t N = size_mul("--batch-size x --seq-len tokens", {batch, seq_len});
  const int64_t C = c.hidden_size;
  train::memory_check_fits(c, {device}, {batch, batch, seq_len, false, false});
  Stream s(device, device.str() + " bench");
  // Inputs in `dtype` (bf16: the working copies of mixed precision); gradients f32.
  auto make_as = [&](int64_t numel, DType dt) {
    if (dt == DType::bf16) {
      return tensor_from_vector(s, std::vector<uint16_t>(numel, float_to_bf16(0.01f)), {numel},
                                DType::bf16, device);
    }
    Tensor t = Tensor::empty({numel}, DType::f32, device);
    flat_fill(s, t, 0.01f);
    return t;
  };
  auto make = [&](int64_t numel) { return make_as(numel, dtype); };
  auto time = [&](const std::function<void()>& fn) {
    fn();  // warm-up
    s.synchronize();
    auto t0 = Clock::now();
    for (int r = 0; r < repeats; ++r) fn();
    s.synchronize();
    return std::chrono::duration<double>(Clock::now() - t0).count() / repeats;
  };
  const std::string tag = dtype == DType::bf16 ? " bf16" : " f32";
  std::vector<OpBenchRow> rows;
  struct Shape {
    const char* what;
    int64_t in, out;
  };
  // The projections as the model runs them (Note [Fused projections]): q/k/v and
  // gate/up fused, and q, k and gate alone as --projections separate runs them.
  const int64_t Hd = c.num_attention_heads * c.head_dim, KVd = c.num_key_value_heads * c.head_dim;
  const Shape shapes[] = {{"q+k+v", C, Hd + 2 * KVd},
                          {"q_proj", C, Hd},
                          {"k_proj", C, KVd},
                          {"gate+up", C, 2 * c.intermediate_size},
                          {"gate_proj", C, c.intermediate_size},
                          {"down_proj", c.intermediate_size, C},
                          {"lm_head", C, c.vocab_size}};
  for (const Shape& sh : shapes) {
    // bf16: projections store bf16 activations, lm_head f32 logits for the loss.
    const bool f32_out = dtype == DType::f32 || std::string(sh.what) == "lm_head";
    Tensor x = make(N * sh.in), w = make(sh.out * sh.in), dy = make(N * sh.out);
    Tensor y = make_as(N * sh.out, f32_out ? DType::f32 : dtype);
    Tensor dx = make_as(N * sh.in, DType::f32), dw = make_as(sh.out * sh.in, DType::f32);
    std::ostringstream shape;
    shape << N << "x" << sh.in << " . " << sh.in << "x" << sh.out << " (" << sh.what << ")";
    double flop = 2.0 * N * sh.in * sh.out / 1e9;
    rows.push_back({"matmul forward" + tag, shape.str(), flop,
                    time([&] { ops::matmul_forward(s, y, x, w, N, sh.in, sh.out); })});
    rows.push_back({"matmul backward" + tag, shape.str(), 2 * flop,
                    time([&] { ops::matmul_backward(s, dx, dw, dy, x, w, N, sh.in, sh.out); })});
  }
  int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
  Tensor q = make(N * H * D), k = make(N * KV * D), v = make(N * KV * D), o = make(N * H * D);
  Tensor lse = make_as(batch * H * seq_len, DType::f32), dq = make(N * H * D),
         dk = make(N * KV * D), dv = make(N * KV * D);
  std::ostringstream shape;
  shape << "B=" << batch << " T=" << seq_len << " H=" << H << " KV=" << KV << " D=" << D;
  // Causal: half of the T x T scores, two GEMM-like products (QK^T, PV).
  double flop = 2.0 * batch * H * seq_len * seq_len * D / 1e9;
  rows.push_back({"attention forward" + tag, shape.str(), flop, time([&] {
                    ops::attention_forward(s, o, lse, q, k, v, batch, seq_len, seq_len, H, KV, D);
                  })});
  rows.push_back({"attention backward" + tag, shape.str(), 2.5 * flop, time([&] {
                    ops::attention_backward(s, dq, dk, dv, o, q, k, v, o, lse, batch, seq_len, H,
                                            KV, D);
                  })});
  return rows;
}

}  // namespace fanout::bench
