#include "apps/train/train_pipeline.h"

#include <algorithm>
#include <chrono>

#include "engine/core/check.h"
#include "engine/parallel/pipeline/balance.h"
#include "engine/parallel/pipeline/pipeline.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "models/llama_tensor.h"

namespace fanout::train {

namespace {

// One unit's forward and backward, alone, on rows x seq_len tokens: the least
// of three timed runs after a warm-up.
double time_unit(const models::LlamaConfig& config, int unit, Device device, int64_t rows,
                 int64_t seq_len, DType working) {
  const int units = static_cast<int>(config.num_hidden_layers) + 2;
  models::LlamaModel m(config, device, device.str() + " balance", working);
  m.set_stage(unit, unit + 1);
  m.init_random(1);
  m.reserve_slots(1, rows, seq_len, false);
  const int64_t n = rows * seq_len;
  Stream& s = m.compute_stream();
  Tensor tokens = Tensor::empty({rows, seq_len}, DType::i32, device, MemTag::data);
  tensor_upload(s, tokens, std::vector<int32_t>(n, 1).data());
  Tensor hidden = Tensor::empty({n * config.hidden_size}, DType::f32, device, MemTag::data);
  tensor_upload(s, hidden, std::vector<float>(n * config.hidden_size, 0.5f).data());
  Tensor stats = Tensor::empty({2}, DType::f32, device, MemTag::data);
  double best = 1e300;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    m.stage_forward(unit == 0 ? tokens : hidden, rows, seq_len, tokens, stats,
                    models::kIgnoreIndex);
    m.stage_backward(unit == units - 1 ? Tensor() : hidden, 1.0f, false);
    s.synchronize();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, t);
  }
  return best;
}

}  // namespace

std::vector<double> pipeline_unit_costs(const models::LlamaConfig& c, const std::string& how,
                                        Device device, int64_t rows, int64_t seq_len,
                                        DType working) {
  const int64_t L = c.num_hidden_layers, C = c.hidden_size, V = c.vocab_size;
  const int64_t Hd = c.num_attention_heads * c.head_dim;
  const int64_t KVd = c.num_key_value_heads * c.head_dim;
  const models::LlamaLayout layout(c);
  std::vector<double> costs;
  if (how == "params") {
    costs.push_back(static_cast<double>(V * C));
    for (int64_t l = 0; l < L; ++l)
      costs.push_back(static_cast<double>(layout.layer(l).end - layout.layer(l).begin));
    costs.push_back(static_cast<double>(C + V * C));  // the final norm and the lm_head it reads
  } else if (how == "flops") {
    // Forward FLOPs per token, times 3 for forward and backward: every GEMM's 2
    // per weight, causal attention's scores and weighted sum (half of T x T each).
    const double gemm = 2.0 * (C * Hd + 2 * C * KVd + Hd * C + 3 * C * c.intermediate_size);
    costs.push_back(3.0 * C);  // a row copy forward, a row add backward
    for (int64_t l = 0; l < L; ++l) costs.push_back(3.0 * (gemm + 2.0 * seq_len * Hd));
    costs.push_back(3.0 * 2.0 * C * V);
  } else {
    FANOUT_ASSERT(how == "time", "unit costs by ", how);
    for (int u = 0; u < static_cast<int>(L) + 2; ++u)
      costs.push_back(time_unit(c, u, device, rows, seq_len, working));
  }
  return costs;
}

namespace {

// What a grid run (--pp or --tp) does not combine with, in one line each.
void refuse_for_grid(const TrainOptions& o, const Setup& s, const std::string& flag) {
  FANOUT_CHECK(!s.ddp.enabled, flag, " runs its devices in one process: it does not combine with ",
               "--strategy ", o.strategy, " across processes");
  parallel::pipeline_strategy_check(
      s.strategy.strategy, static_cast<int>(o.tp),
      parallel::pipe_schedule_parse(o.pp_schedule).value_or(parallel::PipeSchedule::one_f_one_b),
      flag);
  FANOUT_CHECK(s.loss_on == parallel::LossOn::replicas, flag,
               " computes the loss on the last stage: --loss-on output does not combine with it");
  FANOUT_CHECK(o.output_device.empty() && o.micro_batch_sizes.empty(), "--",
               o.output_device.empty() ? "micro-batch-sizes" : "output-device",
               " does not combine with ", flag,
               ": the rows are split evenly over the replicas, the loss stays on the last stage");
}

}  // namespace

void prepare_pipeline(const TrainOptions& o, Setup& s, const std::set<std::string>& given) {
  const int K = static_cast<int>(o.pp), T = static_cast<int>(o.tp);
  const int64_t n = static_cast<int64_t>(s.devices.size()), L = s.config.num_hidden_layers;
  if (K == 1) {
    for (const char* flag : {"pp-schedule", "micro-batches", "balance"}) {
      FANOUT_CHECK(!given.count(flag), "--", flag,
                   " shapes a pipeline: give --pp K (K > 1) to cut the model into stages");
    }
  }
  FANOUT_CHECK(T > 1 || !o.sequence_parallel,
               "--sequence-parallel shards the tokens among tensor-parallel ranks: give --tp T "
               "(T > 1)");
  if (T > 1) {
    const std::string flag = "--tp " + std::to_string(T);
    refuse_for_grid(o, s, flag);
    models::check_tensor_parallel(s.config, T);
    FANOUT_CHECK(n % (int64_t{K} * T) == 0, flag,
                 K > 1 ? " x --pp " + std::to_string(K) : std::string(), " does not divide the ", n,
                 " devices listed: --devices lists D x K x T devices (D replicas of K stages, "
                 "each stage on T tensor-parallel devices)");
  }
  if (K == 1) {
    if (T == 1) return;
    // Tensor parallelism alone: one stage, the whole batch of each replica at once.
    const int64_t D = n / T;
    FANOUT_CHECK(s.micro_rows >= D, "each step's batch of ", s.micro_rows,
                 " rows (--batch-size / --grad-accum) is smaller than the ", D, " replicas");
    s.cut = {0, static_cast<int>(L) + 2};
    s.micro_batches = 1;
    return;
  }
  refuse_for_grid(o, s, "--pp " + std::to_string(K));
  FANOUT_CHECK(n % (int64_t{K} * T) == 0, "--pp ", K, " does not divide the ", n,
               " devices listed: --devices lists K x D devices (K stages for each of D "
               "replicas)");
  const int64_t D = n / (K * T);
  const int64_t rows = s.micro_rows / D;  // the fewest rows a replica gets
  FANOUT_CHECK(rows >= 1, "each step's batch of ", s.micro_rows,
               " rows (--batch-size / --grad-accum) is smaller than the ", D, " pipeline replicas");
  s.micro_batches = static_cast<int>(given.count("micro-batches") ? o.micro_batches
                                                                  : std::min<int64_t>(2 * K, rows));
  FANOUT_CHECK(s.micro_batches <= rows, "--micro-batches ", s.micro_batches, " needs at least ",
               s.micro_batches, " rows per pipeline replica; each step's batch of ", s.micro_rows,
               " rows (--batch-size / --grad-accum) gives ", rows, " to each of ", D,
               D == 1 ? " replica" : " replicas");
  s.pipe_schedule = *parallel::pipe_schedule_parse(o.pp_schedule);
  std::vector<double> costs;
  if (o.balance == "params" || o.balance == "flops" || o.balance == "time") {
    const int64_t micro_rows = std::max<int64_t>(1, rows / s.micro_batches);
    costs = pipeline_unit_costs(s.config, o.balance, s.devices[0], micro_rows, o.seq_len,
                                precision_dtype(o.precision));
    s.cut = parallel::balance_cut(costs, K);
  } else {
    s.cut = parallel::balance_from_layers(parallel::parse_balance_list(o.balance),
                                          static_cast<int>(L), K);
  }
  s.notes.push_back("pipeline: " + std::to_string(K) + " stages x " + std::to_string(D) +
                    (D == 1 ? " replica, " : " replicas, ") + o.pp_schedule + ", " +
                    std::to_string(s.micro_batches) + " micro-batches per step; " +
                    parallel::describe_cut(s.cut, static_cast<int>(L), costs));
}

}  // namespace fanout::train
