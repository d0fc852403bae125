#include "apps/walkthrough/walkthrough_page.h"

#include <algorithm>
#include <numeric>

#include "apps/presentation/step_times.h"
#include "apps/presentation/text_format.h"
#include "engine/parallel/strategy.h"

namespace fanout::walkthrough {

namespace {

using presentation::strf;

std::vector<int> all_boxes(size_t n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<int> boxes_except(size_t n, int skip) {
  std::vector<int> v;
  for (int i = 0; i < static_cast<int>(n); ++i)
    if (i != skip) v.push_back(i);
  return v;
}

// The command line that runs `mode` on `devices`.
std::string flags_of(const std::string& mode, const std::vector<Device>& devices) {
  const std::string n = std::to_string(devices.size());
  if (mode == "ddp") return "fanout launch --nproc-per-node " + n + " -- train --strategy ddp";
  std::string flags;
  if (mode.rfind("pp-", 0) == 0) {
    flags = "--pp " + n + " --pp-schedule " + mode.substr(3);
  } else if (mode == "tp") {
    flags = "--tp " + n;
  } else if (const parallel::Mode* m = parallel::mode_find(mode)) {
    flags = parallel::mode_flags(*m);
  }
  return "fanout train --devices " + devices_str(devices) + " " + flags;
}

std::string title_of(const std::string& mode, const std::string& fallback) {
  const parallel::Mode* m = parallel::mode_find(mode);
  return m && !m->title.empty() ? m->title : fallback;
}

// The host's copy of each box's token ids (and targets where the loss is computed).
PageMove scatter(const std::vector<int64_t>& rows, int64_t T, bool targets_everywhere,
                 const std::string& counter) {
  PageMove m;
  m.kind = "scatter";
  m.what = targets_everywhere ? "token ids and targets" : "token ids (targets to the primary)";
  m.from = {PageMove::kHost};
  int64_t all = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] == 0) continue;
    m.to.push_back(static_cast<int>(r));
    m.bytes += rows[r] * T * 4 * (targets_everywhere ? 2 : 1);
    all += rows[r];
  }
  if (!targets_everywhere) m.bytes += all * T * 4;
  m.counter = counter;
  return m;
}

PageMove move(std::string kind, std::string what, std::vector<int> from, std::vector<int> to,
              int64_t bytes, std::string counter) {
  PageMove m;
  m.kind = std::move(kind), m.what = std::move(what);
  m.from = std::move(from), m.to = std::move(to);
  m.bytes = bytes, m.counter = std::move(counter);
  return m;
}

// A section for mode `name` on `devices`: its anchor, heading and flags.
PageSection section_named(const std::string& name, const std::vector<Device>& devices) {
  PageSection s;
  s.id = s.name = name;
  s.title = title_of(name, name);
  s.flags = flags_of(name, devices);
  return s;
}

// What every section draws the same way: the memory, the step, its throughput.
void set_step(PageSection& s, const WalkthroughOptions& o,
              const std::vector<presentation::DevicePeak>& memory, const WalkthroughStepTrace& step,
              int number, const std::vector<double>& timed_ms, double loss) {
  s.memory = memory;
  s.step = step;
  s.step_number = number;
  s.tokens_per_step = o.batch_size * o.seq_len;
  s.timed_ms = timed_ms;
  s.loss = loss;
}

const char* const kCounted = "DataParallel::comm_bytes() over the step";

PageSection data_parallel(const WalkthroughMode& m, const WalkthroughOptions& o) {
  PageSection s = section_named(m.name, o.devices);
  const size_t n = o.devices.size();
  for (size_t r = 0; r < n; ++r)
    s.boxes.push_back({strf("replica %zu", r), o.devices[r].str(), r == 0 ? "primary" : ""});
  set_step(s, o, m.memory, m.last, static_cast<int>(m.losses.size()), m.timed_ms,
           m.losses.empty() ? 0 : m.losses.back());
  const int64_t T = o.seq_len, V = o.config.vocab_size;
  const std::string split = "rows x tokens x 4 bytes, the engine's split of the batch";
  const std::vector<int> others = boxes_except(n, 0);
  if (m.name == "dp-output") {
    s.moves.push_back(scatter(m.rows, T, false, split));
    s.moves.push_back(move("broadcast", "weights", {0}, others, m.last_weights_sent, kCounted));
    int64_t crossed = 0;
    std::vector<int> from;
    for (size_t r = 0; r < n; ++r)
      if (m.rows[r] > 0 && !(o.devices[r] == o.devices[0])) {
        crossed += m.rows[r] * T * V * 4;
        from.push_back(static_cast<int>(r));
      }
    s.moves.push_back(move("gather", "logits", from.empty() ? others : from, {0}, crossed,
                           "rows x tokens x vocabulary x 4 bytes from the other devices"));
    s.moves.push_back(move("reduce", "gradients", others, {0}, m.last_sums_sent, kCounted));
    s.explain = {
        "What PyTorch's nn.DataParallel does: the batch is split over the replicas, the primary "
        "broadcasts its weights, and every replica runs forward on its rows.",
        "The logits are gathered onto the output device, where the loss is computed; the "
        "gradients are reduced onto the primary, and only the primary runs AdamW, so it holds "
        "the optimizer state and the gathered logits alone.",
    };
  } else if (m.name == "dp" || m.name == "dp-overlap") {
    s.moves.push_back(scatter(m.rows, T, true, split));
    s.moves.push_back(move("broadcast", "weights", {0}, others, m.last_weights_sent, kCounted));
    s.moves.push_back(move("reduce", m.name == "dp" ? "gradients" : "gradients, bucket by bucket",
                           others, {0}, m.last_sums_sent, kCounted));
    if (m.name == "dp")
      s.explain = {
          "The loss moves onto the replicas: each computes the loss of its own rows and sends "
          "back only a sum and a count, so no logits are gathered.",
          "Gradients are still reduced onto the primary after backward, and the primary's "
          "AdamW updates weights that it broadcasts again at the next step.",
      };
    else
      s.explain = {
          strf("The gradient buffer is cut into %lld buckets; as soon as every replica has "
               "computed a bucket, its reduction runs on the comm streams while backward goes on "
               "with the layers below.",
               static_cast<long long>(m.buckets)),
          "The bytes are dp's; the timeline shows the reduce spans on the comm lanes beside the "
          "backward spans.",
      };
  } else if (m.name == "zero1" || m.name == "zero2") {
    s.moves.push_back(scatter(m.rows, T, true, split));
    const std::vector<int> all = all_boxes(n);
    s.moves.push_back(move("reduce-scatter",
                           m.name == "zero1" ? "gradients" : "gradients, unit by unit", all, all,
                           m.last_sums_sent, kCounted));
    s.moves.push_back(
        move("all-gather", "updated weights", all, all, m.last_update_sent, kCounted));
    s.explain = {
        "Each device owns one shard of the weights: it receives only its shard's summed "
        "gradients (reduce-scatter), keeps AdamW's state for that shard alone and updates it, "
        "then sends its new values to the others (all-gather).",
        m.name == "zero1"
            ? "Every replica still holds whole gradients during backward; nothing is broadcast "
              "from a primary."
            : "zero2 also frees the gradients: each unit's are reduce-scattered as soon as "
              "backward leaves it, so a device keeps only its shard of them.",
    };
  } else {  // zero3
    s.moves.push_back(scatter(m.rows, T, true, split));
    const std::vector<int> all = all_boxes(n);
    s.moves.push_back(move("all-gather", "weights, unit by unit (forward and backward)", all, all,
                           m.last_weights_sent, kCounted));
    s.moves.push_back(
        move("reduce-scatter", "gradients, unit by unit", all, all, m.last_sums_sent, kCounted));
    s.explain = {
        "No device holds the whole model: weights, gradients and optimizer state are all "
        "sharded, and each unit (the embedding, a layer, the head) is gathered just before it "
        "runs and freed after.",
        "Backward gathers the layers again; the update needs no all-gather, since each owner's "
        "updated shard is what the next forward gathers.",
    };
  }
  return s;
}

PageSection ddp_section(const WalkthroughDdp& d, const WalkthroughOptions& o) {
  PageSection s = section_named("ddp", o.devices);
  const size_t n = static_cast<size_t>(d.world);
  std::vector<int64_t> rows;
  for (size_t r = 0; r < n; ++r) {
    s.boxes.push_back({strf("process %zu", r), o.devices[r].str(), r == 0 ? "rank 0" : ""});
    rows.push_back(r < d.rows.size() ? d.rows[r].second : 0);
  }
  set_step(s, o, d.memory, d.last, static_cast<int>(d.losses.size()), d.timed_ms,
           d.losses.empty() ? 0 : d.losses.back());
  s.moves.push_back(scatter(rows, o.seq_len, true, "each process reads its own rows"));
  const std::vector<int> all = all_boxes(n);
  if (d.ran) {
    int64_t sent = 0;
    for (int64_t b : d.measured_sent) sent += b;
    s.moves.push_back(move("all-reduce", "gradients, bucket by bucket (rings)", all, all, sent,
                           "ProcessGroup::bytes_sent() over the step, summed over the ranks"));
  } else {
    s.moves.push_back(move("all-reduce", "gradients, bucket by bucket (rings)", all, all,
                           d.sent_total(), "computed: 2(W-1)/W of each bucket per rank"));
    s.note = "computed, not run: " + d.refused;
  }
  s.explain = {
      "One process per device, each with a whole replica, its own optimizer and its own rows: "
      "nothing passes through a primary.",
      "The gradient buckets are summed by ring all-reduces (each rank sends 2(W-1)/W of the "
      "bytes) while backward goes on; every rank then runs the same AdamW step.",
      d.ran ? "Here the ranks are threads of this process, each with its own Gloo connection "
              "over the loopback; fanout launch runs them as processes with the same code."
            : "",
  };
  if (s.explain.back().empty()) s.explain.pop_back();
  return s;
}

PageSection pipeline_section(const WalkthroughPipeline& p, const WalkthroughOptions& o) {
  PageSection s = section_named("pp-" + p.schedule, p.devices);
  const size_t K = p.devices.size();
  for (size_t k = 0; k < K; ++k)
    s.boxes.push_back({strf("stage %zu", k), p.devices[k].str(),
                       k == 0 ? "embedding first" : (k + 1 == K ? "head last" : "")});
  set_step(s, o, p.memory, p.last, 1, p.timed_ms, p.loss);
  const int64_t ids = o.batch_size * o.seq_len * 4;
  s.moves.push_back(move("scatter", "token ids to the first stage, targets to the last",
                         {PageMove::kHost}, {0, static_cast<int>(K) - 1}, 2 * ids,
                         "rows x tokens x 4 bytes, twice"));
  // Every stage sends and receives: hidden states forward, gradients back.
  s.moves.push_back(move("stage to stage", "hidden states forward, their gradients back",
                         all_boxes(K), all_boxes(K), p.boundary_bytes,
                         "Pipeline::bytes_moved() over the step"));
  const char* how =
      p.schedule == "gpipe"
          ? "GPipe runs every micro-batch's forward, then every backward: simple, and the stages "
            "wait at both ends."
      : p.schedule == "zb1"
          ? "Zero-bubble (zb1) splits each backward into its input gradient, which the stage "
            "before is waiting for, and its weight gradient, which fills the waits."
          : "1F1B runs a backward as soon as it can after the warm-up forwards, so a stage keeps "
            "fewer micro-batches of activations alive.";
  s.explain = {
      strf("The model is cut into %zu stages (%s), one per device, and the batch streams through "
           "them in %d micro-batches; only the hidden states and their gradients cross between "
           "devices, never the weights.",
           K, p.cut.c_str(), p.micro_batches),
      how,
      strf("Bubble (the stages' idle share): %.0f%% measured from the trace, %.0f%% by the "
           "schedule with equal costs.",
           100 * p.bubble_measured, 100 * p.bubble_schedule),
  };
  return s;
}

PageSection tensor_section(const WalkthroughTensor& t, const WalkthroughOptions& o) {
  PageSection s = section_named("tp", t.devices);
  for (size_t k = 0; k < t.devices.size(); ++k)
    s.boxes.push_back(
        {strf("rank %zu", k), t.devices[k].str(), strf("1/%d of each matrix", t.ranks)});
  set_step(s, o, t.memory, t.last, 1, t.timed_ms, t.loss);
  const std::vector<int> all = all_boxes(t.devices.size());
  s.moves.push_back(move("scatter", "token ids and targets, the whole batch to each rank",
                         {PageMove::kHost}, all,
                         2 * o.batch_size * o.seq_len * 4 * static_cast<int64_t>(t.devices.size()),
                         "rows x tokens x 4 bytes, twice per rank"));
  s.moves.push_back(move("all-reduce",
                         strf("%d partial sums of (tokens x hidden), and the loss's "
                              "per-token figures",
                              t.all_reduces),
                         all, all, t.bytes_moved, "Pipeline::bytes_moved() over the step"));
  s.explain = {
      "Every weight matrix is split: attention by heads, the MLP by its units, the embedding "
      "and the head by vocabulary rows. Each device computes its share of every GEMM on the "
      "whole batch.",
      "After each block's row-parallel projection the partial sums are added up across the "
      "devices (an all-reduce), forward and backward; no device ever holds the whole logits.",
  };
  if (!t.holds.empty()) s.explain.push_back("rank 0 holds " + t.holds[0] + ".");
  return s;
}

}  // namespace

int64_t PageSection::bytes_moved() const {
  int64_t b = 0;
  for (const PageMove& m : moves)
    if (std::find(m.from.begin(), m.from.end(), PageMove::kHost) == m.from.end()) b += m.bytes;
  return b;
}

double PageSection::tokens_per_s() const {
  if (timed_ms.empty()) return 0;
  const double median = presentation::step_times_summarize(timed_ms).median;
  return median > 0 ? static_cast<double>(tokens_per_step) / (median / 1e3) : 0;
}

std::vector<PageSection> walkthrough_sections(const WalkthroughResult& r,
                                              const WalkthroughOptions& o) {
  std::vector<PageSection> out;
  for (const WalkthroughMode& m : r.modes) out.push_back(data_parallel(m, o));
  if (r.ddp.world > 1) out.push_back(ddp_section(r.ddp, o));
  for (const WalkthroughPipeline& p : r.schedules) out.push_back(pipeline_section(p, o));
  if (r.tensor.ranks > 0) out.push_back(tensor_section(r.tensor, o));
  return out;
}

}  // namespace fanout::walkthrough
