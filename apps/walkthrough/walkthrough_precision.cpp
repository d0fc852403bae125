#include "apps/walkthrough/walkthrough_precision.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>

#include "apps/data/data_loader.h"
#include "apps/train/training.h"
#include "apps/walkthrough/walkthrough_prose.h"
#include "engine/core/check.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_model.h"

namespace fanout::walkthrough::walk {

namespace {

using parallel::DataParallel;
using parallel::Strategy;

constexpr int kSteps = 2;  // step 2 is the first to send weights changed by an update

struct RunSpec {
  std::string strategy;
  Strategy kind;
  DType working, grad_comm;
};

std::string dtype_flag(DType d) {
  return d == DType::bf16 ? "bf16" : "fp32";
}
std::string setting(const WalkthroughPrecisionRun& r) {
  return r.grad_comm == "bf16" ? r.precision + ", --grad-comm bf16" : r.precision;
}
std::string losses_str(const WalkthroughPrecisionRun& r) {
  std::string s;
  for (double l : r.losses) s += strf("%s%.5f", s.empty() ? "" : ", ", l);
  return s;
}
std::string difference_str(double d) {
  return d == 0 ? "0 (the same bits)" : strf("%.1e", d);
}
double largest_difference(const WalkthroughPrecisionRun& a, const WalkthroughPrecisionRun& b) {
  double worst = 0;
  for (size_t i = 0; i < a.losses.size() && i < b.losses.size(); ++i)
    worst = std::max(worst, std::abs(a.losses[i] - b.losses[i]));
  return worst;
}

class PrecisionSection : public Prose {
 public:
  PrecisionSection(const WalkthroughOptions& o, const data::TokenData& data, std::ostream& out)
      : Prose(out, o.color, o.width), o_(o), data_(data), layout_(o.config), P_(layout_.total()) {
    for (const Device& d : o.devices)
      if (std::find(distinct_.begin(), distinct_.end(), d) == distinct_.end())
        distinct_.push_back(d);
  }

  std::vector<WalkthroughPrecisionRun> run(int index);

 private:
  WalkthroughPrecisionRun run_one(const RunSpec& spec);
  // "P*2", "3 x P*4": `bytes` as copies of the flat buffer at `element` bytes
  // per parameter; the raw count when it is not a whole number of copies.
  std::string copies(int64_t bytes, int64_t element) const {
    if (bytes == 0) return "nothing crossed devices";
    if (bytes % (P_ * element) != 0) return strf("%.2f bytes per parameter", double(bytes) / P_);
    int64_t k = bytes / (P_ * element);
    return k == 1 ? strf("P*%lld", (long long)element)
                  : strf("%lld x P*%lld", (long long)k, (long long)element);
  }
  // "P*6": bytes per parameter, when whole.
  std::string per_param(size_t bytes) const {
    return bytes % size_t(P_) == 0 ? strf("P*%zu", bytes / size_t(P_))
                                   : strf("%.2f bytes per parameter", double(bytes) / P_);
  }
  std::string half(int64_t now, int64_t before) const {
    if (before > 0 && 2 * now == before) return "exactly half";
    return before > 0 ? strf("x%.3f", double(now) / double(before)) : "no bytes either way";
  }
  void narrate(const std::vector<WalkthroughPrecisionRun>& runs);

  const WalkthroughOptions& o_;
  const data::TokenData& data_;
  models::LlamaLayout layout_;
  int64_t P_;
  std::vector<Device> distinct_;
};

WalkthroughPrecisionRun PrecisionSection::run_one(const RunSpec& spec) {
  WalkthroughPrecisionRun r;
  r.strategy = spec.strategy;
  r.precision = dtype_flag(spec.working);
  r.grad_comm = dtype_flag(spec.grad_comm);
  std::vector<AllocatorStats> before;
  for (const Device& d : distinct_) {
    before.push_back(allocator_for(d).stats());
    allocator_for(d).reset_peak();
  }
  {
    train::TrainingOptions options;
    options.config = o_.config;
    options.devices = o_.devices;
    options.strategy = spec.kind;
    options.loss_on = parallel::LossOn::replicas;
    options.working = spec.working;
    options.grad_comm = spec.grad_comm;
    // The same initial weights as the modes (seed 1).
    train::Training training(options, train::InitialWeights{});
    DataParallel& dp = training.engine();
    const float lr = options.adam.lr;
    data::DataLoader loader(data_, o_.batch_size, o_.seq_len, true, false, 0, models::kIgnoreIndex);
    for (int step = 1; step <= kSteps; ++step) {
      data::Batch b = loader.next();
      parallel::HostBatch hb{b.B, b.T, b.inputs.data(), b.targets.data()};
      dp.reset_times();  // and the byte counters
      const train::Training::StepResult done =
          training.step(hb, static_cast<double>(b.counted()), step, lr, 1.0);
      const parallel::LossStats& st = done.loss;
      const double norm = done.grad_norm;
      FANOUT_CHECK(std::isfinite(norm), "the gradient norm is ", norm, " at step ", step, " (",
                   r.strategy, ", ", setting(r), ")");
      r.losses.push_back(st.loss_sum / static_cast<double>(st.count));
      parallel::CommBytes bytes = dp.comm_bytes();
      if (step == 1) r.first_replicate_bytes = bytes.replicate;
      r.replicate_bytes = bytes.replicate, r.reduce_bytes = bytes.reduce;
    }
  }
  r.memory = presentation::device_peaks_above(distinct_, before);
  return r;
}

std::vector<WalkthroughPrecisionRun> PrecisionSection::run(int index) {
  out_ << "\n";
  title(strf("%d. precision: what bf16 changes", index));
  more(strf(
      "dp and zero1 once more, %d steps each on the same batches, three ways: fp32; "
      "--precision bf16 (mixed precision: fp32 master weights, gradients and AdamW state, bf16 "
      "working weights and the activations GEMMs read and write); and bf16 with --grad-comm "
      "bf16 (each sender rounds its gradients to bf16, the receiver sums them in fp32). The bytes "
      "are the engine's own counters, DataParallel::comm_bytes(): what its collectives copied "
      "from one device to another",
      kSteps));
  std::vector<WalkthroughPrecisionRun> runs;
  for (auto [name, kind] : {std::pair{"dp", Strategy::dp}, {"zero1", Strategy::zero1}})
    for (auto [working, grad_comm] :
         {std::pair{DType::f32, DType::f32}, {DType::bf16, DType::f32}, {DType::bf16, DType::bf16}})
      runs.push_back(run_one({name, kind, working, grad_comm}));
  narrate(runs);
  return runs;
}

void PrecisionSection::narrate(const std::vector<WalkthroughPrecisionRun>& runs) {
  // runs: dp fp32, bf16, bf16 + grad-comm; zero1 the same
  const WalkthroughPrecisionRun &f = runs[0], &b = runs[1], &g = runs[2];
  const WalkthroughPrecisionRun &zf = runs[3], &zb = runs[4], &zg = runs[5];
  // --wide: as it always was, the label "bytes" on the line of the heads.
  const bool wide = width_ == 0;
  presentation::TextTable t;
  t.indent = std::string(wide ? kIndent : 4, ' ');
  t.columns = {{"step 2, between devices", wide ? 35u : 0u, true},
               {"weights sent", wide ? 12u : 0u},
               {"gradient sums", wide ? 16u : 0u},
               {(wide ? "  " : "") + std::string("losses, steps 1 and 2"), 0, true}};
  for (const WalkthroughPrecisionRun& r : runs) {
    t.rows.push_back({{strf("%-*s %s", wide ? 12 : 5, r.strategy.c_str(), setting(r).c_str()),
                       strf("%lld", (long long)r.replicate_bytes),
                       strf("%lld", (long long)r.reduce_bytes), (wide ? "  " : "") + losses_str(r)},
                      ""});
  }
  if (wide) {
    std::ostringstream table_text;
    Prose into(table_text, color_, width_);
    into.table(t);
    out_ << "  " << bold("bytes") << "      " << table_text.str().substr(kIndent);
  } else {
    out_ << "  " << bold("bytes") << "\n";
    table(t);
  }

  bool crossed = false;
  for (const WalkthroughPrecisionRun& r : runs)
    crossed = crossed || r.first_replicate_bytes > 0 || r.reduce_bytes > 0;
  if (!crossed) {
    line("replicate", "every replica is on " + o_.devices[0].str() +
                          ": the collectives copy within one device and move no bytes between "
                          "devices, in any precision. Two devices (--devices cpu:0,cpu:1) show "
                          "bf16 halving them");
  } else {
    line("replicate",
         strf("dp: after step 1's update the primary rounds its fp32 master to bf16 once and "
              "broadcasts the working weights, %lld bytes (%s), vs %lld (%s) in fp32: %s. zero1: "
              "each owner rounds its updated shard and the bf16 shards are all-gathered, %lld vs "
              "%lld bytes: %s",
              (long long)b.replicate_bytes, copies(b.replicate_bytes, 2).c_str(),
              (long long)f.replicate_bytes, copies(f.replicate_bytes, 4).c_str(),
              half(b.replicate_bytes, f.replicate_bytes).c_str(), (long long)zb.replicate_bytes,
              (long long)zf.replicate_bytes, half(zb.replicate_bytes, zf.replicate_bytes).c_str()));
    more(
        strf("step 1 sent the freshly initialised fp32 master in every precision (dp: %lld bytes "
             "in fp32, %lld in bf16), and in bf16 each replica rounded its own working copy",
             (long long)f.first_replicate_bytes, (long long)b.first_replicate_bytes));
    line("reduce",
         strf("--precision bf16 leaves the gradient sums alone, the gradients are fp32: %lld bytes "
              "(%s) in both. --grad-comm bf16 rounds what travels and the receiver adds in fp32: "
              "%lld bytes (%s), %s; zero1's reduce-scatter %lld -> %lld bytes, %s",
              (long long)b.reduce_bytes, copies(b.reduce_bytes, 4).c_str(),
              (long long)g.reduce_bytes, copies(g.reduce_bytes, 2).c_str(),
              half(g.reduce_bytes, b.reduce_bytes).c_str(), (long long)zb.reduce_bytes,
              (long long)zg.reduce_bytes, half(zg.reduce_bytes, zb.reduce_bytes).c_str()));
  }

  line("memory",
       "peak bytes per device in the dp runs (allocator stats by tag; bf16+gc: with "
       "--grad-comm bf16)");
  std::vector<std::pair<std::string, presentation::DevicePeak>> rows;
  for (const WalkthroughPrecisionRun* r : {&f, &b, &g}) {
    std::string label = r->grad_comm == "bf16" ? "bf16+gc" : r->precision;
    for (const presentation::DevicePeak& d : r->memory) rows.push_back({label + " " + d.device, d});
  }
  memory_table("", 13, rows);
  const presentation::DevicePeak &m32 = f.memory[0], &m16 = b.memory[0];
  auto tag = [](const presentation::DevicePeak& d, MemTag t) { return bytes_str(d.tag(t)); };
  // Replicas sharing the primary's device each hold their own buffers.
  size_t k = static_cast<size_t>(std::count(o_.devices.begin(), o_.devices.end(), distinct_[0]));
  std::string each = k > 1 ? strf(" per replica, %zu replicas here", k) : "";
  more(
      strf("params %zu -> %zu bytes on %s (%s -> %s%s): the fp32 master plus a bf16 working "
           "copy, the weights forward and backward read. grads and optimizer are unchanged. "
           "activations %s -> %s (x%.2f): the GEMMs' inputs and outputs are bf16; the residual "
           "stream, the statistics and the logits stay fp32",
           m32.tag(MemTag::params), m16.tag(MemTag::params), m32.device.c_str(),
           per_param(m32.tag(MemTag::params) / k).c_str(),
           per_param(m16.tag(MemTag::params) / k).c_str(), each.c_str(),
           tag(m32, MemTag::activations).c_str(), tag(m16, MemTag::activations).c_str(),
           double(m16.tag(MemTag::activations)) /
               double(std::max<size_t>(m32.tag(MemTag::activations), 1))));
  std::string why =
      m16.peak_bytes > m32.peak_bytes
          ? strf(
                "at %lld x %lld tokens the working copy outweighs what the arena saves; the "
                "arena grows with the batch, the copy does not",
                (long long)o_.batch_size, (long long)o_.seq_len)
          : std::string("the arena saves more than the working copy costs");
  more(strf("total on %s %s -> %s: %s", m32.device.c_str(), bytes_str(m32.peak_bytes).c_str(),
            bytes_str(m16.peak_bytes).c_str(), why.c_str()));
  if (b.memory.size() > 1) {
    const presentation::DevicePeak &r16 = b.memory[1], &rg = g.memory[1];
    more(strf(
        "comm with --grad-comm bf16: %s %s -> %s, the receiver stages bf16; %s %s -> %s, "
        "a bf16 send buffer each sender rounds its gradients into",
        m16.device.c_str(), tag(m16, MemTag::comm).c_str(), tag(g.memory[0], MemTag::comm).c_str(),
        r16.device.c_str(), tag(r16, MemTag::comm).c_str(), tag(rg, MemTag::comm).c_str()));
  }

  std::string step1 = g.losses[0] == b.losses[0]
                          ? "the step 1 loss is bf16's to the bit (nothing had been summed yet)"
                          : strf("the step 1 loss differs from bf16's by %.1e",
                                 std::abs(g.losses[0] - b.losses[0]));
  line("loss",
       strf("bf16 differs from fp32 by up to %.1e: rounding the working weights and the GEMMs' "
            "inputs to 8 bits of mantissa gives a loss close to fp32's, not the same one. With "
            "--grad-comm bf16 %s, and step 2 moves by %.1e",
            largest_difference(b, f), step1.c_str(), std::abs(g.losses.back() - b.losses.back())));
  more("zero1 vs dp: largest difference " +
       difference_str(std::max(largest_difference(zf, f), largest_difference(zb, b))) +
       " in fp32 and bf16; " + difference_str(largest_difference(zg, g)) +
       " with --grad-comm bf16, because a receiver adds its own gradients unrounded: dp's primary "
       "keeps all of its own, each zero1 owner only its shard's, so other values get rounded");
  line("fp32 stays",
       "the master weights, the gradients and AdamW's m and v: gradients are summed over "
       "micro-batches and replicas, where rounding would bias the update (--grad-comm bf16 rounds "
       "only what travels; the sum is fp32). The residual stream, a running sum over the layers "
       "where bf16's 8 bits of mantissa would swallow small block outputs. RMSNorm's and "
       "attention's statistics, the logits and the loss, which need fp32's range. Checkpoints "
       "hold the fp32 master (Note [Mixed precision] in models/llama_model.cpp)");
}

}  // namespace

std::vector<WalkthroughPrecisionRun> walkthrough_precision(const WalkthroughOptions& o,
                                                           const data::TokenData& data, int index,
                                                           std::ostream& out) {
  PrecisionSection section(o, data, out);
  return section.run(index);
}

}  // namespace fanout::walkthrough::walk
