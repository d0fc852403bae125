#include "apps/train/train_options.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "apps/train/device_memory.h"
#include "engine/core/check.h"
#include "engine/parallel/pipeline/balance.h"
#include "engine/parallel/pipeline/schedule.h"
#include "engine/parallel/strategy.h"
#include "models/llama_model.h"
#include "ops/attention.h"
#include "ops/gemm_plan.h"

namespace fanout::train {

// One list of (flag name, member) pairs serves both directions.
// clang-format off  (clang-format 14 does not settle on a list macro)
#define FANOUT_TRAIN_OPTIONS(X)             \
  X("preset", preset)                       \
  X("config", config)                       \
  X("init", init)                           \
  X("data", data)                           \
  X("val-data", val_data)                   \
  X("val-split", val_split)                 \
  X("packing", packing)                     \
  X("shuffle", shuffle)                     \
  X("output-device", output_device)         \
  X("device-memory", device_memory)         \
  X("strategy", strategy)                   \
  X("loss-on", loss_on)                     \
  X("overlap", overlap)                     \
  X("bucket-mb", bucket_mb)                 \
  X("batch-size", batch_size)               \
  X("seq-len", seq_len)                     \
  X("grad-accum", grad_accum)               \
  X("micro-batch-sizes", micro_batch_sizes) \
  X("steps", steps)                         \
  X("warmup", warmup)                       \
  X("lr", lr)                               \
  X("min-lr", min_lr)                       \
  X("weight-decay", weight_decay)           \
  X("beta1", beta1)                         \
  X("beta2", beta2)                         \
  X("eps", eps)                             \
  X("clip", clip)                           \
  X("schedule", schedule)                   \
  X("precision", precision)                 \
  X("grad-comm", grad_comm)                 \
  X("seed", seed)                           \
  X("save-every", save_every)               \
  X("eval-every", eval_every)               \
  X("val-batches", val_batches)             \
  X("keep-last", keep_last)                 \
  X("save-best", save_best)                 \
  X("early-stop", early_stop)
// clang-format on

nlohmann::json train_options_to_json(const TrainOptions& o) {
  nlohmann::json j = nlohmann::json::object();
#define X(name, member) j[name] = o.member;
  FANOUT_TRAIN_OPTIONS(X)
#undef X
  return j;
}

namespace {

// The JSON kind a member's value must have, named for messages.
template <typename T>
bool json_fits(const nlohmann::json& v, const char*& expected) {
  if constexpr (std::is_same_v<T, bool>) {
    expected = "true or false";
    return v.is_boolean();
  } else if constexpr (std::is_same_v<T, std::string>) {
    expected = "a string";
    return v.is_string();
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    expected = "a non-negative integer";
    return v.is_number_unsigned();
  } else if constexpr (std::is_integral_v<T>) {
    expected = "an integer";
    return v.is_number_integer() &&
           (!v.is_number_unsigned() ||
            v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  } else {
    expected = "a finite number";
    return v.is_number() && std::isfinite(v.get<double>());
  }
}

template <typename T>
void merge_one(T& member, const nlohmann::json& j, const char* name,
               const std::set<std::string>& keep) {
  if (keep.count(name) || !j.contains(name)) return;
  const nlohmann::json& v = j.at(name);
  const char* expected = "";
  FANOUT_CHECK(json_fits<T>(v, expected), "the saved run settings are damaged: \"", name,
               "\" must be ", expected, ", got ", v.dump());
  member = v.get<T>();
}

void check_count(int64_t v, const char* flag, int64_t lo) {
  FANOUT_CHECK(v >= lo && v <= kMaxCount, "--", flag, " must be within ", lo, "..", kMaxCount,
               ", got ", v);
}

void check_real(double v, const char* flag, double lo, double hi, bool open_low) {
  FANOUT_CHECK(std::isfinite(v) && (open_low ? v > lo : v >= lo) && v <= hi, "--", flag,
               " must be a finite number in ", open_low ? "(" : "[", lo, ", ", hi, "], got ", v);
}

}  // namespace

void train_options_merge(TrainOptions& o, const nlohmann::json& j,
                         const std::set<std::string>& keep) {
  FANOUT_CHECK(j.is_object(), "the saved run settings are not a JSON object");
#define X(name, member) merge_one(o.member, j, name, keep);
  FANOUT_TRAIN_OPTIONS(X)
#undef X
  // Checkpoints before precision was validated saved "" for "the device's default";
  // checkpoints before --grad-comm have none (fp32).
  if (o.precision.empty()) o.precision = "fp32";
  if (o.grad_comm.empty()) o.grad_comm = "fp32";
  // Checkpoints before --val-split trained on all of their --data.
  if (!j.contains("val-split") && !keep.count("val-split")) o.val_split = 0;
  // Note [Validation settings]: "val-batches" is the stored name; checkpoints written
  // before it saved the same setting as "eval-batches", and the flag keeps that name
  // as an alias (cmd_train.cpp), so either given again counts as "val-batches".
  if (!j.contains("val-batches") && !keep.count("val-batches")) {
    merge_one(o.val_batches, j, "eval-batches", keep);
  }
}

void train_options_validate(const TrainOptions& o) {
  check_count(o.batch_size, "batch-size", 1);
  check_count(o.seq_len, "seq-len", 0);
  check_count(o.grad_accum, "grad-accum", 1);
  check_count(o.steps, "steps", 1);
  check_count(o.warmup, "warmup", 0);
  check_count(o.save_every, "save-every", 0);
  check_count(o.eval_every, "eval-every", 0);
  check_count(o.val_batches, "val-batches", 0);
  check_count(o.keep_last, "keep-last", 0);
  check_count(o.early_stop, "early-stop", 0);
  check_real(o.bucket_mb, "bucket-mb", 0, kMaxBucketMb, true);
  check_real(o.lr, "lr", 0, 1e6, true);
  check_real(o.min_lr, "min-lr", 0, 1e6, false);
  check_real(o.weight_decay, "weight-decay", 0, 1e6, false);
  check_real(o.beta1, "beta1", 0, 1, false);
  FANOUT_CHECK(o.beta1 < 1, "--beta1 must be in [0, 1), got ", o.beta1);
  check_real(o.beta2, "beta2", 0, 1, false);
  FANOUT_CHECK(o.beta2 < 1, "--beta2 must be in [0, 1), got ", o.beta2);
  check_real(o.eps, "eps", 0, 1, true);
  check_real(o.clip, "clip", 0, 1e9, false);
  check_real(o.val_split, "val-split", 0, 0.5, false);
  check_real(o.timeout, "timeout", 0, 1e6, true);
  if (!o.device_memory.empty()) parse_byte_size(o.device_memory, "--device-memory");
  FANOUT_CHECK(o.packing == "on" || o.packing == "off", "--packing must be on or off, got '",
               o.packing, "'");
  parallel::strategy_flag_parse(o.strategy);
  parallel::loss_on_parse(o.loss_on);
  FANOUT_CHECK(o.precision == "fp32" || o.precision == "bf16",
               "--precision must be fp32 or bf16, got '", o.precision, "'");
  FANOUT_CHECK(o.grad_comm == "fp32" || o.grad_comm == "bf16",
               "--grad-comm must be fp32 or bf16, got '", o.grad_comm, "'");
  check_count(o.global_batch_size, "global-batch-size", 0);
  check_count(o.max_batch_size, "max-batch-size", 0);
  FANOUT_CHECK(o.batch_size_search == "power" || o.batch_size_search == "binsearch",
               "--batch-size-search must be power or binsearch, got '", o.batch_size_search, "'");
  check_real(o.batch_size_margin, "batch-size-margin", 0, 0.9, false);
  FANOUT_CHECK(o.offload.empty() || o.offload == "optimizer",
               "--offload must be optimizer (fp32 master weights and AdamW state in host "
               "memory), got '",
               o.offload, "'");
  check_count(o.pp, "pp", 1);
  check_count(o.tp, "tp", 1);
  check_count(o.micro_batches, "micro-batches", 0);
  FANOUT_CHECK(parallel::pipe_schedule_parse(o.pp_schedule).has_value(),
               "--pp-schedule must be gpipe, 1f1b or zb1, got '", o.pp_schedule, "'");
  if (o.balance != "params" && o.balance != "flops" && o.balance != "time") {
    FANOUT_CHECK(o.balance.find_first_of("0123456789") != std::string::npos,
                 "--balance must be params, flops, time or decoder layers per stage (e.g. 3,5), "
                 "got '",
                 o.balance, "'");
    parallel::parse_balance_list(o.balance);
  }
}

void train_options_check_validation(const TrainOptions& o, bool has_val) {
  for (const char* flag : {"save-best", "early-stop"}) {
    const bool on = flag[0] == 's' ? o.save_best : o.early_stop > 0;
    if (!on) continue;
    FANOUT_CHECK(
        has_val, "--", flag,
        " compares held-out losses: give --val-data FILE (or --data with --val-split > 0)");
    FANOUT_CHECK(o.eval_every > 0, "--", flag,
                 " compares held-out losses: give --eval-every N (N > 0)");
  }
}

DType precision_dtype(const std::string& precision, const char* flag) {
  FANOUT_CHECK(precision == "fp32" || precision == "bf16", flag, " must be fp32 or bf16, got '",
               precision, "'");
  // Every device kind runs both: CPU devices through oneDNN, CUDA through cuBLASLt.
  return precision == "fp32" ? DType::f32 : DType::bf16;
}

void attention_apply(const std::string& attention, DType working,
                     const std::vector<Device>& devices) {
  const ops::AttentionImpl impl = ops::attention_impl_parse(attention);
  if (impl == ops::AttentionImpl::cudnn) {
    FANOUT_CHECK(any_cuda(devices),
                 "--attention cudnn runs on CUDA devices; these are CPU devices");
    FANOUT_CHECK(working == DType::bf16,
                 "--attention cudnn runs in bf16 (cuDNN's fused attention has no fp32 path): "
                 "add --precision bf16, or use --attention exact");
  }
  ops::attention_set_impl(impl);
}

void gemm_algo_apply(const std::string& gemm_algo, bool bf16, const std::vector<Device>& devices) {
  const ops::GemmAlgoChoice choice = ops::gemm_algo_choice_parse(gemm_algo, "--gemm-algo");
  if (choice == ops::GemmAlgoChoice::timed) {
    FANOUT_CHECK(any_cuda(devices),
                 "--gemm-algo timed times cuBLASLt's GEMM algorithms on CUDA devices; these are "
                 "CPU devices");
    FANOUT_CHECK(bf16,
                 "--gemm-algo timed chooses among cuBLASLt's bf16 GEMM algorithms (fp32 "
                 "GEMMs run through cublasSgemm): add --precision bf16");
  }
  ops::gemm_set_algo_choice(choice);
}

bool all_cuda(const std::vector<Device>& devices) {
  return !devices.empty() &&
         std::all_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cuda(); });
}

bool any_cuda(const std::vector<Device>& devices) {
  return std::any_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cuda(); });
}

std::string projections_apply(const std::string& projections, const std::vector<Device>& devices) {
  FANOUT_CHECK(projections == "auto" || projections == "fused" || projections == "separate",
               "--projections must be auto, fused or separate, got '", projections, "'");
  const bool fused = projections == "fused" || (projections == "auto" && all_cuda(devices));
  models::set_fused_projections_default(fused);
  return fused ? "fused" : "separate";
}

bool graphs_fit(int64_t pp, int64_t tp, const std::string& loss_on, bool overlap,
                const std::string& strategy) {
  return pp == 1 && tp == 1 && loss_on == "replicas" && !overlap &&
         (strategy == "dp" || strategy == "ddp" || strategy == "zero1");
}

bool graphs_parse(const TrainOptions& o, const std::string& strategy, const std::string& loss_on) {
  FANOUT_CHECK(o.graphs == "auto" || o.graphs == "on" || o.graphs == "off",
               "--graphs must be auto, on or off, got '", o.graphs, "'");
  if (o.graphs != "on") return false;
  FANOUT_CHECK(o.pp == 1 && o.tp == 1, "--graphs on records each replica's forward and backward; ",
               "a --", o.pp > 1 ? "pp" : "tp", " grid passes activations between devices in them");
  FANOUT_CHECK(loss_on == "replicas", "--graphs on needs --loss-on replicas: with --loss-on ",
               loss_on, " the logits leave the replicas between forward and backward");
  FANOUT_CHECK(!o.overlap, "--graphs on records backward whole: it cannot overlap the gradient ",
               "sums with it (add --no-overlap)");
  FANOUT_CHECK(strategy != "zero2" && strategy != "zero3", "--graphs on works with --strategy ",
               "dp, ddp or zero1: ", strategy,
               " hands each layer's gradients over during backward");
  return true;
}

std::string graphs_resolve(const TrainOptions& o, const std::vector<Device>& devices) {
  graphs_parse(o, o.strategy, o.loss_on);
  if (o.graphs != "auto") return o.graphs;
  return all_cuda(devices) && graphs_fit(o.pp, o.tp, o.loss_on, o.overlap, o.strategy) ? "on"
                                                                                       : "off";
}

int64_t preset_seq_len(const std::string& preset) {
  if (preset == "small") return 256;
  if (preset == "seed") return 512;
  return 128;
}

}  // namespace fanout::train
