#pragma once
// `fanout walkthrough`: a narrated run of the DataParallel engine on a small
// Llama and the embedded corpus — the modes of `fanout bench` and `fanout train`:
// dp-output (nn.DataParallel), dp (the loss on the replicas), dp-overlap, zero1,
// zero2, zero3 — each phase told with the engine's real numbers (rows, shapes,
// shards, bytes, milliseconds, bytes per device and kind from the allocators),
// an ASCII timeline per mode from the trace spans, and the whole trace written
// for Perfetto; then a ddp step (computed: one process per device, a ring
// all-reduce), what bf16 changes, and the modes' warm step times.

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "apps/presentation/device_peak.h"
#include "apps/presentation/step_times.h"
#include "engine/core/allocator.h"
#include "engine/core/device.h"
#include "engine/core/trace.h"
#include "models/llama_config.h"

namespace fanout::walkthrough {

// The tiny preset cut to 2 layers: every phase shows, and a step takes milliseconds.
models::LlamaConfig walkthrough_config();

struct WalkthroughOptions {
  std::vector<Device> devices;  // device_ids; devices[0] is the primary
  int64_t batch_size = 5;       // 5 over 2 devices: a visibly uneven 3 + 2
  int64_t seq_len = 32;
  int steps = 2;  // narrated steps per mode
  // Then, untraced: timing_warmup more steps (the narrated ones warm up already),
  // and timed_steps whose median and spread the summary compares.
  int timing_warmup = 0, timed_steps = 5;
  models::LlamaConfig config = walkthrough_config();
  double bucket_mb = 0.25;  // --overlap buckets: small, so the small model has several
  int timeline_width = 60;  // columns, fewer where `width` needs
  // The columns to fit (the terminal's); 0: --wide, prose wrapped at 110 columns
  // and tables, headings and timelines whole, as the walkthrough always printed.
  size_t width = 0;
  bool color = false;      // ANSI colours in headings and timelines
  std::string trace_path;  // the Perfetto trace of every mode; empty: not written
};

// One step as the page draws it (walkthrough_html.h): the engine's byte counters
// and the trace spans over [t0_us, t1_us], the last narrated step of a section.
struct WalkthroughStepTrace {
  std::vector<TraceSpan> spans;
  int64_t t0_us = 0, t1_us = 0;
};

// The figures one mode's narration quoted.
struct WalkthroughMode {
  std::string name;                              // dp-output, dp, dp-overlap, zero1, zero2, zero3
  std::vector<int64_t> rows;                     // per replica
  std::vector<size_t> scatter_bytes;             // token ids (inputs) per replica
  size_t gather_bytes = 0;                       // logits gathered onto the output device
  size_t grad_bytes = 0;                         // gradients sent by each non-primary replica
  std::vector<size_t> optimizer_bytes;           // AdamW state per replica's device
  std::vector<presentation::DevicePeak> memory;  // per distinct device
  std::vector<double> losses;                    // per step
  std::vector<double> step_ms;                   // per narrated step, wall clock
  std::vector<double> timed_ms;                  // per warm, untraced timed step
  int64_t buckets = 0;                           // --overlap
  int64_t early_reductions = 0;                  // reduce spans that began before backward ended
  std::vector<int64_t> shard_elements;           // zero1/2/3: the elements each replica owns
  int64_t units = 0;  // zero2/3: units reduced (zero3: gathered) one by one
  // Step 1's DataParallel::comm_bytes(): weights sent between devices up to the
  // update (dp's and zero1/2's broadcast of the fresh master, zero3's gathers),
  // gradient sums, and weights sent by the update (zero1/2's all-gather).
  int64_t weights_sent = 0, sums_sent = 0, update_sent = 0;
  int64_t gather_forward = 0, gather_backward = 0;  // zero3: what the units predict
  // The last narrated step: its comm_bytes() (as above) and its spans.
  int64_t last_weights_sent = 0, last_sums_sent = 0, last_update_sent = 0;
  WalkthroughStepTrace last;
};

// One run of the precision section: a strategy in one precision, two steps on the
// modes' first batches. Bytes are DataParallel::comm_bytes(), the engine's counters
// of what its collectives copied from one device to another.
struct WalkthroughPrecisionRun {
  std::string strategy;               // dp, zero1
  std::string precision = "fp32";     // --precision: fp32, bf16
  std::string grad_comm = "fp32";     // --grad-comm: fp32, bf16
  int64_t first_replicate_bytes = 0;  // step 1: the fresh fp32 master (+ zero1's all-gather)
  int64_t replicate_bytes = 0, reduce_bytes = 0;  // step 2: weights after an update; gradient sums
  std::vector<presentation::DevicePeak> memory;   // per distinct device
  std::vector<double> losses;                     // per step
};

// The ddp section's figures (walkthrough_ddp.h): one step of `fanout launch
// --nproc-per-node W -- train --strategy ddp` on this model and batch, computed
// as ProcessGroup::bytes_sent() counts them, then run where it can be.
struct WalkthroughDdp {
  int world = 1;
  int64_t parameters = 0, grad_bytes = 0;  // P, and P*4 bytes of fp32 gradients
  // Per rank: its rows [first, first + count) of the global batch; whole weights,
  // gradients (P*4 each) and AdamW m and v (2*P*4).
  std::vector<std::pair<int64_t, int64_t>> rows;
  int64_t weight_bytes = 0, optimizer_bytes = 0;
  // The gradient buckets [begin, end) in launch order (the top of the buffer
  // first), each its own ring all-reduce, and what rank 0 sends for each.
  std::vector<std::pair<int64_t, int64_t>> buckets;
  std::vector<int64_t> bucket_sent;
  std::vector<int64_t> sent_by_rank;  // per step and rank: the sum over buckets
  int64_t ring_formula = 0;  // 2(W-1)/W x grad_bytes rounded down: the whole buffer in one ring
  int64_t sent_total() const {
    int64_t total = 0;
    for (int64_t b : sent_by_rank) total += b;
    return total;
  }
  int64_t start_broadcast = 0;  // rank 0's weights to each rank once, before step 1
  int64_t host_sum_bytes = 0;   // the loss and stop flags summed as doubles, per step
  // The same step run for real (walkthrough_ddp_run.h): the ranks as threads of
  // this process, each with its own Gloo group over the loopback; `refused` says
  // why not when it could not run (CUDA devices, one device).
  std::string refused;
  bool ran = false;
  std::vector<int64_t> measured_sent;  // per rank: ProcessGroup::bytes_sent() over the last step
  std::vector<double> losses;          // per step, the global batch's
  std::vector<presentation::DevicePeak> memory;  // per distinct device
  std::vector<double> timed_ms;                  // warm, untraced steps
  WalkthroughStepTrace last;                     // the last narrated step's spans
};

// The pipeline section's figures (walkthrough_pipeline.h): one 1F1B step.
struct WalkthroughPipeline {
  int stages = 0, micro_batches = 0;
  std::string cut;   // the stages' units, one line
  std::string grid;  // the schedule as a stage x time grid (equal stage costs)
  double bubble_schedule = 0, bubble_measured = -1;
  double loss = 0, dp_loss = 0;  // this step's, and dp's on the same batch and weights
  int64_t boundary_bytes = 0;    // hidden states and their gradients between stages
  std::vector<presentation::DevicePeak> memory;  // per distinct device
  std::string schedule = "1f1b";                 // gpipe, 1f1b, zb1
  std::vector<Device> devices;                   // stage s on devices[s]
  std::vector<double> timed_ms;                  // warm, untraced steps
  WalkthroughStepTrace last;                     // the traced step
};

// The tensor-parallel section's figures (walkthrough_tensor.h): one --tp step.
struct WalkthroughTensor {
  int ranks = 0;                   // 0: the model's heads do not divide over two devices
  std::string refused;             // why not, then
  std::vector<std::string> holds;  // per rank: what it holds of one layer and the vocabulary
  int64_t all_reduce_bytes = 0;    // one all-reduce's buffer: tokens x hidden x 4
  int all_reduces = 0;             // in the step: 4 per layer, the embedding's, the head's
  // What those and the loss's gather copy between devices as the local
  // collectives do them (each all-reduce: T - 1 buffers in, T - 1 out), and what
  // the step measured (0 when the ranks share one device).
  int64_t bytes_expected = 0, bytes_moved = 0;
  double loss = 0, dp_loss = 0;
  std::vector<presentation::DevicePeak> memory;  // per distinct device
  std::vector<Device> devices;                   // rank t on devices[t]
  std::vector<double> timed_ms;                  // warm, untraced steps
  WalkthroughStepTrace last;                     // the traced step
};

struct WalkthroughResult {
  int64_t parameters = 0;
  std::vector<WalkthroughMode> modes;
  WalkthroughDdp ddp;
  // fp32, bf16, bf16 + --grad-comm bf16 for dp, then for zero1.
  std::vector<WalkthroughPrecisionRun> precision;
  WalkthroughPipeline pipeline;  // 1F1B, narrated
  // Every schedule (gpipe, 1f1b, zb1) on the same devices, each one traced step.
  std::vector<WalkthroughPipeline> schedules;
  WalkthroughTensor tensor;
};

// Runs the six modes in order, narrates a ddp step (computed, then run with the
// ranks as threads on CPU devices), then the precision section (not traced), the
// pipeline schedules, tensor parallelism and the summary of warm step times, writing
// the narration to `out`. Takes over the process-wide trace recorder while it runs
// (cleared first, then recording every mode; left disabled) and writes
// options.trace_path at the end if set.
WalkthroughResult walkthrough_run(const WalkthroughOptions& options, std::ostream& out);

}  // namespace fanout::walkthrough
