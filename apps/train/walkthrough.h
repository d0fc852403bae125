#pragma once
// `fanout walkthrough`: a narrated run of the DataParallel engine on a small
// Llama and the embedded corpus — faithful dp, --loss-on replicas, --overlap,
// zero1, zero2, zero3 — each phase told with the engine's real numbers (rows,
// shapes, shards, bytes, milliseconds, bytes per device and kind from the
// allocators), an ASCII timeline per mode from the trace spans, and the whole
// trace written for Perfetto; then what bf16 mixed precision and bf16 gradient
// sums change, from the byte counters.

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/device.h"
#include "models/llama_config.h"

namespace fanout::train {

// The tiny preset cut to 2 layers: every phase shows, and a step takes milliseconds.
models::LlamaConfig walkthrough_config();

struct WalkthroughOptions {
  std::vector<Device> devices;  // device_ids; devices[0] is the primary
  int64_t batch_size = 5;       // 5 over 2 devices: a visibly uneven 3 + 2
  int64_t seq_len = 32;
  int steps = 2;  // per mode
  models::LlamaConfig config = walkthrough_config();
  double bucket_mb = 0.25;  // --overlap buckets: small, so the small model has several
  int timeline_width = 60;  // columns
  bool color = false;       // ANSI colours in headings and timelines
  std::string trace_path;   // the Perfetto trace of every mode; empty: not written
};

// Peak bytes of one device during a mode, in total and per MemTag (above what
// the device held before the mode started).
struct DeviceMemory {
  std::string device;
  size_t total = 0;
  std::array<size_t, kNumMemTags> by_tag{};
  size_t tag(MemTag t) const { return by_tag[static_cast<int>(t)]; }
};

// The figures one mode's narration quoted.
struct WalkthroughMode {
  std::string name;                     // dp, dp-replicas, dp-overlap, zero1, zero2, zero3
  std::vector<int64_t> rows;            // per replica
  std::vector<size_t> scatter_bytes;    // token ids (inputs) per replica
  size_t gather_bytes = 0;              // logits gathered onto the output device
  size_t grad_bytes = 0;                // gradients sent by each non-primary replica
  std::vector<size_t> optimizer_bytes;  // AdamW state per replica's device
  std::vector<DeviceMemory> memory;     // per distinct device
  std::vector<double> losses;           // per step
  std::vector<double> step_ms;          // per step, wall clock
  int64_t buckets = 0;                  // --overlap
  int64_t early_reductions = 0;         // reduce spans that began before backward ended
  std::vector<int64_t> shard_elements;  // zero1/2/3: the elements each replica owns
  int64_t units = 0;                    // zero2/3: units reduced (zero3: gathered) one by one
  // Step 1's DataParallel::comm_bytes(): weights sent between devices up to the
  // update (dp's and zero1/2's broadcast of the fresh master, zero3's gathers),
  // gradient sums, and weights sent by the update (zero1/2's all-gather).
  int64_t weights_sent = 0, sums_sent = 0, update_sent = 0;
  int64_t gather_forward = 0, gather_backward = 0;  // zero3: what the units predict
};

// One run of the precision section: a strategy in one precision, two steps on the
// modes' first batches. Bytes are DataParallel::comm_bytes(), the engine's counters
// of what its collectives copied from one device to another.
struct WalkthroughPrecisionRun {
  std::string strategy;               // dp-replicas, zero1
  std::string precision = "fp32";     // --precision: fp32, bf16
  std::string grad_comm = "fp32";     // --grad-comm: fp32, bf16
  int64_t first_replicate_bytes = 0;  // step 1: the fresh fp32 master (+ zero1's all-gather)
  int64_t replicate_bytes = 0, reduce_bytes = 0;  // step 2: weights after an update; gradient sums
  std::vector<DeviceMemory> memory;               // per distinct device
  std::vector<double> losses;                     // per step
};

struct WalkthroughResult {
  int64_t parameters = 0;
  std::vector<WalkthroughMode> modes;
  // fp32, bf16, bf16 + --grad-comm bf16 for dp-replicas, then for zero1; empty
  // where bf16 is not available (CUDA devices, for now).
  std::vector<WalkthroughPrecisionRun> precision;
};

// Runs the six modes in order, then the precision section (not traced), writing
// the narration to `out`. Takes over the process-wide trace recorder while it runs
// (cleared first, then recording every mode; left disabled) and writes
// options.trace_path at the end if set.
WalkthroughResult walkthrough_run(const WalkthroughOptions& options, std::ostream& out);

}  // namespace fanout::train
