#pragma once
// Every setting of `fanout train`, with its default. The names are the flags'
// names (a contract): they are stored verbatim in each checkpoint's
// trainer_state.json, so a resumed run continues with the settings it started
// with, except those given again on the command line.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/device.h"
#include "engine/core/dtype.h"

namespace fanout::train {

struct TrainOptions {
  // model
  std::string preset = "tiny", config, init;
  // data
  std::string data, val_data, packing = "on";
  bool shuffle = false;
  // The share of --data held out when no --val-data is given (0: none). Checkpoints
  // from before it held nothing out: read back as 0 (Note [A run's own held-out
  // split] in apps/data/held_out.cpp).
  double val_split = 0.05;
  // A tokenizer.json for text data ("": the byte tokenizer, or a resumed or --init
  // checkpoint's tokenizer.json). Run-local: a checkpoint carries the file itself.
  std::string tokenizer;
  // devices and parallelism
  std::string devices, output_device, strategy = "dp", loss_on = "replicas";
  std::string device_memory;  // a cap on each device's live bytes, e.g. 512MiB ("": none)
  bool overlap = false;
  double bucket_mb = 25.0;
  // Pipeline parallelism (engine/parallel/pipeline/): stages, the schedule, the
  // micro-batches each step streams (0: 2 x stages, at most the rows each
  // replica gets), and how the model is cut (params, flops, time, or layers per
  // stage "L1,L2,..."). Run-local, like devices: a run resumes under any grid.
  int64_t pp = 1, micro_batches = 0;
  // Tensor parallelism: each stage (the whole model without --pp) split over tp
  // devices (models/llama_tensor.h). Run-local too.
  int64_t tp = 1;
  bool sequence_parallel = false;  // the residual stream sharded by rows among the tp ranks
  std::string pp_schedule = "1f1b", balance = "params";
  // Recompute each layer's forward in backward instead of keeping its
  // activations (every strategy). Run-local: the results are the same.
  bool recompute = false;
  // batch
  int64_t batch_size = 16, seq_len = 0, grad_accum = 1;  // seq_len 0: the preset's
  std::string micro_batch_sizes;
  // --batch-size auto (apps/train/batch_finder.h): the largest batch that fits,
  // found by trial steps; with global_batch_size (0: none) accumulated to it. All
  // run-local: a checkpoint saves the batch size and accumulation that were found.
  bool batch_size_auto = false;
  int64_t global_batch_size = 0, max_batch_size = 0;  // max 0: the data's rows
  std::string batch_size_search = "binsearch";
  double batch_size_margin = 0.1;  // the share of each device's memory kept free
  // --offload optimizer: fp32 master weights and AdamW state in host memory, the
  // update on host threads (""; none). Run-local: the results are the same.
  std::string offload;
  // optimisation
  int64_t steps = 300, warmup = 30;
  double lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8,
         clip = 1.0;
  // precision: fp32, or bf16 mixed precision (Note [Mixed precision] in
  // models/llama_model.cpp); grad_comm: the dtype gradient sums travel in.
  std::string schedule = "cosine", precision = "fp32", grad_comm = "fp32";
  // The attention kernel on CUDA devices: auto (cuDNN's fused SDPA in bf16 where it
  // loads, else the exact kernel), exact or cudnn. Run-local, like devices.
  std::string attention = "auto";
  // How cuBLASLt's algorithm is chosen for each bf16 GEMM shape on CUDA devices:
  // heuristic (its first answer) or timed (its best answers timed at first use;
  // Note [Timed GEMM algorithms] in ops/cuda/gemm_cublas.cu). Run-local.
  std::string gemm_algo = "heuristic";
  // separate, or fused (q/k/v as one GEMM, gate/up as one): the same values up to
  // the order of fp32 sums (Note [Fused projections]); auto: fused where every
  // device is a CUDA device, separate on CPU devices (projections_apply). Run-local,
  // like attention.
  std::string projections = "auto";
  // on: each replica's forward and backward recorded once and replayed (CUDA
  // graphs on CUDA devices; Note [Step graphs] in
  // engine/parallel/data_parallel_graphs.cpp), or off; auto: on where every device
  // is a CUDA device and the run can record (graphs_resolve). Run-local: the same
  // values.
  std::string graphs = "auto";
  uint64_t seed = 1234;
  // run
  std::string out, resume, trace;
  int64_t save_every = 100, eval_every = 100;
  // Held-out batches per evaluation (0: the whole set). Stored as "val-batches";
  // --eval-batches is its older name (Note [Validation settings] in train_options.cpp).
  int64_t val_batches = 0;
  // Step checkpoints kept (0: all); best/ holds the best held-out loss; stop after
  // this many evaluations without improvement (0: never).
  int64_t keep_last = 0, early_stop = 0;
  bool save_best = false;
  bool json = false;
  // ddp (set by the launcher's environment)
  double timeout = 300.0;
};

// Bounds on what a flag (or a resumed run's saved settings) may ask for: counts of
// steps, rows, tokens per row and intervals; the gradient bucket size in MiB.
constexpr int64_t kMaxCount = 1'000'000'000;
constexpr double kMaxBucketMb = 1'000'000;

// Every setting on its own in range (numbers finite, counts within kMaxCount, names
// known), whether it came from a flag or from a checkpoint; throws naming the flag.
void train_options_validate(const TrainOptions& o);

nlohmann::json train_options_to_json(const TrainOptions& o);
// Takes every setting from `j` except the names in `keep` (flags the user gave
// again); run-local settings (out, resume, trace, json, devices) are never taken.
void train_options_merge(TrainOptions& o, const nlohmann::json& j,
                         const std::set<std::string>& keep);

// --save-best and --early-stop compare held-out losses: they need held-out data
// (`has_val`) and --eval-every > 0; throws one line naming the flag otherwise.
void train_options_check_validation(const TrainOptions& o, bool has_val);

// The working dtype of `--precision` (fp32 or bf16) for a run on `devices`;
// refuses an unknown name, naming `flag`.
DType precision_dtype(const std::string& precision, const char* flag = "--precision");

// Applies `--attention` (auto, exact or cudnn) for this process, refusing an unknown
// name and cudnn where it cannot run (fp32, CPU-only devices, a build without cuDNN).
void attention_apply(const std::string& attention, DType working,
                     const std::vector<Device>& devices);

// Applies `--gemm-algo` (heuristic or timed) for this process, refusing an unknown
// name and timed where no GEMM would be timed: no CUDA device, or no bf16 (`bf16`:
// some run in bf16; fp32 GEMMs run through cublasSgemm).
void gemm_algo_apply(const std::string& gemm_algo, bool bf16, const std::vector<Device>& devices);

// Whether every one of `devices` is a CUDA device (and there is one): where the
// auto defaults of --projections and --graphs turn on what measured faster.
bool all_cuda(const std::vector<Device>& devices);
// Whether one of `devices` is a CUDA device: where --attention cudnn and
// --gemm-algo timed have something to act on.
bool any_cuda(const std::vector<Device>& devices);

// Applies `--projections` (auto, fused or separate) to the models this process
// makes on `devices`, refusing any other value; returns what auto chose: fused
// where all_cuda (one GEMM for q/k/v and one for gate/up paid on an H200), else
// separate (on CPU devices fusing saves calls but not time).
std::string projections_apply(const std::string& projections, const std::vector<Device>& devices);

// Whether step graphs can record a run of this shape: one stage and one tensor
// rank, the loss on the replicas, no overlap, and dp, ddp or zero1 (the others
// need the host inside backward).
bool graphs_fit(int64_t pp, int64_t tp, const std::string& loss_on, bool overlap,
                const std::string& strategy);

// Whether `--graphs` is on, refusing a value other than auto, on or off, and "on"
// for a run that cannot record its step (`strategy` and `loss_on` as given); auto
// reads as off here until graphs_resolve turns it into on or off.
bool graphs_parse(const TrainOptions& o, const std::string& strategy, const std::string& loss_on);

// `--graphs auto` as on or off for a run on `devices`: on where all_cuda and
// graphs_fit (they paid on an H200: 1.5x on the tiny preset, 3 % at 16 x 512 on
// the seed preset), else off. On and off stay as given.
std::string graphs_resolve(const TrainOptions& o, const std::vector<Device>& devices);

// The preset's default sequence length (tiny 128, small 256, seed 512).
int64_t preset_seq_len(const std::string& preset);

}  // namespace fanout::train
