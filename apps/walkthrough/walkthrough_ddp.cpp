#include "apps/walkthrough/walkthrough_ddp.h"

#include <algorithm>
#include <string>
#include <utility>

#include "apps/train/ddp_env.h"
#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/parallel/grad_buckets.h"

namespace fanout::walkthrough::walk {

namespace {

int mod(int a, int w) {
  return ((a % w) + w) % w;
}

// Chunk q of [begin, end) over w ranks: the pieces the process group's ring cuts
// (shard_bounds: 10 over 4 is 2, 3, 2, 3).
std::pair<int64_t, int64_t> chunk_of(int64_t begin, int64_t end, int w, int q) {
  std::vector<int64_t> at = shard_bounds(end - begin, w);
  return {begin + at[q], begin + at[q + 1]};
}

const WalkthroughMode* find(const std::vector<WalkthroughMode>& done, const std::string& name) {
  for (const WalkthroughMode& m : done)
    if (m.name == name) return &m;
  return nullptr;
}

// "step 1: r0 -> r1 c1, r1 -> r0 c0"; past 4 ranks the first two steps and a count.
void narrate_steps(Prose& p, const char* what, const std::vector<std::vector<RingMove>>& steps) {
  for (size_t s = 0; s < steps.size(); ++s) {
    if (s == 2 && steps.size() > 3) {
      p.more(strf("  %s steps 3..%zu: the same pattern, shifted by one chunk each step", what,
                  steps.size()));
      break;
    }
    std::string moves;
    for (const RingMove& m : steps[s])
      moves += strf("%sr%d -> r%d c%d", moves.empty() ? "" : ", ", m.from, m.to, m.chunk);
    p.more(strf("  %s step %zu: %s", what, s + 1, moves.c_str()));
  }
}

// What the real run (walkthrough_ddp_run.h) measured beside the computed
// figures, or why the step was only computed.
void narrate_run(Prose& p, const WalkthroughDdp& d, const std::vector<WalkthroughMode>& done) {
  if (!d.ran) {
    if (!d.refused.empty()) p.line("run", "this step was computed, not run: " + d.refused);
    return;
  }
  std::string sent, losses;
  const bool same = d.measured_sent == d.sent_by_rank;
  for (size_t r = 0; r < d.measured_sent.size(); ++r)
    sent += strf("%sr%zu %lld", r ? ", " : "", r, (long long)d.measured_sent[r]);
  for (size_t s = 0; s < d.losses.size(); ++s) losses += strf("%s%.5f", s ? ", " : "", d.losses[s]);
  p.line("measured",
         strf("the same step, run for real: each rank a thread of this process with its own "
              "Training and its own Gloo group over the loopback (fanout launch makes them "
              "processes; the engine's code is the same). Each rank's process group counted the "
              "bytes it sent in the last step: %s, %s the figures computed above",
              sent.c_str(), same ? "exactly" : "against"));
  const WalkthroughMode* faithful = find(done, "dp-output");
  std::string theirs;
  if (faithful)
    for (size_t s = 0; s < faithful->losses.size() && s < d.losses.size(); ++s)
      theirs += strf("%s%.5f", s ? ", " : "", faithful->losses[s]);
  p.more(theirs.empty()
             ? strf("its losses per step: %s", losses.c_str())
             : strf("its losses per step, %s, against dp-output's %s: the same model, weights "
                    "and batches, the rows split across processes instead of replicas",
                    losses.c_str(), theirs.c_str()));
}

}  // namespace

int64_t ring_all_reduce_bytes(int64_t elements, int64_t elem_bytes, int world, int rank) {
  FANOUT_ASSERT(world >= 1 && 0 <= rank && rank < world && elements >= 0 && elem_bytes > 0,
                "ring_all_reduce_bytes(", elements, ", ", elem_bytes, ", ", world, ", ", rank, ")");
  if (world == 1) return 0;
  // What gloo_group.cpp's rings add to bytes_sent().
  const std::vector<int64_t> at = shard_bounds(elements, world);
  const int next = (rank + 1) % world;
  return (2 * elements - (at[rank + 1] - at[rank]) - (at[next + 1] - at[next])) * elem_bytes;
}

std::vector<std::vector<RingMove>> ring_reduce_scatter_steps(int world) {
  std::vector<std::vector<RingMove>> steps(static_cast<size_t>(std::max(world - 1, 0)));
  for (int s = 0; s + 1 < world; ++s)
    for (int r = 0; r < world; ++r)
      steps[s].push_back({r, mod(r + 1, world), mod(r - s - 1, world)});
  return steps;
}

std::vector<std::vector<RingMove>> ring_all_gather_steps(int world) {
  std::vector<std::vector<RingMove>> steps(static_cast<size_t>(std::max(world - 1, 0)));
  for (int s = 0; s + 1 < world; ++s)
    for (int r = 0; r < world; ++r) steps[s].push_back({r, mod(r + 1, world), mod(r - s, world)});
  return steps;
}

WalkthroughDdp ddp_step_compute(int64_t parameters, int world, int64_t batch_rows,
                                double bucket_mb) {
  FANOUT_CHECK(world >= 1 && parameters > 0 && batch_rows >= 0, "a ddp step needs ranks and ",
               "parameters");
  WalkthroughDdp d;
  d.world = world, d.parameters = parameters;
  d.grad_bytes = parameters * 4;
  for (int r = 0; r < world; ++r) {
    train::DdpEnv e;
    e.rank = r, e.world = world;
    d.rows.push_back(e.rows_of(batch_rows));
  }
  d.weight_bytes = parameters * 4;
  d.optimizer_bytes = 2 * parameters * 4;
  // One replica per process: the engine's buckets for it, top first.
  parallel::GradBuckets buckets(parameters, bucket_mb, 1);
  for (int64_t k = 0; k < buckets.count(); ++k) {
    auto [lo, hi] = buckets.bucket(k);
    d.buckets.push_back({lo, hi});
    d.bucket_sent.push_back(ring_all_reduce_bytes(hi - lo, 4, world, 0));
  }
  for (int r = 0; r < world; ++r) {
    d.sent_by_rank.push_back(0);
    for (auto [lo, hi] : d.buckets)
      d.sent_by_rank.back() += ring_all_reduce_bytes(hi - lo, 4, world, r);
  }
  d.ring_formula = 2 * (world - 1) * d.grad_bytes / world;
  d.start_broadcast = world > 1 ? d.weight_bytes : 0;
  d.host_sum_bytes = 3 * 8;  // trainer.cpp: loss sum, SIGINT and SIGTERM flags
  return d;
}

void ddp_narrate(const WalkthroughOptions& o, const WalkthroughDdp& d,
                 const std::vector<WalkthroughMode>& done, int index, std::ostream& out) {
  Prose p(out, o.color, o.width);
  const int W = d.world;
  const long long P = d.parameters, G = d.grad_bytes;
  out << "\n";
  p.title(strf("%d. ddp: one process per device, gradients all-reduced in a ring", index));
  p.more(
      strf("`fanout launch --nproc-per-node %d -- train --strategy ddp --devices %s` starts %d "
           "process%s (ranks), rank r on device r of %s. First computed: these bytes are what "
           "ProcessGroup::bytes_sent() counts in such a run; then, on CPU devices, run with the "
           "ranks as threads of this process (fanout bench --modes ddp measures real processes)",
           W, o.devices[0].is_cpu() ? "cpu" : "cuda", W, W == 1 ? "" : "es",
           devices_str(o.devices).c_str()));
  // What each process holds.
  std::string rows;
  for (int r = 0; r < W; ++r) {
    auto [first, count] = d.rows[static_cast<size_t>(r)];
    rows += strf("%sr%d rows [%lld, %lld)", r ? ", " : "", r, (long long)first,
                 (long long)(first + count));
  }
  p.line("holds",
         strf("each rank a whole replica: %lld parameters = %lld bytes of weights, its own "
              "gradients (%lld bytes) and its own AdamW m and v (%lld bytes, 2*P*4): the "
              "weights stay equal because every rank applies the same update to the same "
              "summed gradients",
              P, (long long)d.weight_bytes, G, (long long)d.optimizer_bytes));
  p.more(
      strf("every rank reads the same global batch of %lld row%s and runs only its own shard "
           "(DistributedSampler's split): %s; it knows the global token count, so its loss "
           "is normalised as one device's would be",
           (long long)o.batch_size, o.batch_size == 1 ? "" : "s", rows.c_str()));
  if (W == 1) {
    p.line("sends", "nothing: one rank's gradients are already the whole batch's");
    narrate_run(p, d, done);
    return;
  }
  p.more(
      strf("before step 1 rank 0 broadcasts its weights once (%lld bytes to each other rank); no "
           "step broadcasts weights after that",
           (long long)d.start_broadcast));
  // What it sends.
  std::string bucket_list;
  for (size_t k = 0; k < d.buckets.size(); ++k) {
    if (k == 4 && d.buckets.size() > 5) {
      bucket_list += strf(", ... %zu more", d.buckets.size() - 4);
      break;
    }
    bucket_list +=
        strf("%s#%zu [%lld, %lld) %lld bytes", k ? ", " : "", k, (long long)d.buckets[k].first,
             (long long)d.buckets[k].second, (long long)d.bucket_sent[k]);
  }
  parallel::GradBuckets default_buckets(P, 25.0, 1);
  p.line(
      "sends",
      strf("its gradient buckets, each all-reduced as soon as backward has produced it "
           "(overlap, the default; --no-overlap waits for the whole buffer): %zu buckets of "
           "up to %s (--bucket-mb %g; train's default 25 gives %lld for this model); what rank 0 "
           "sends for each: %s",
           d.buckets.size(), bytes_str(static_cast<size_t>(o.bucket_mb * 1024 * 1024)).c_str(),
           o.bucket_mb, (long long)default_buckets.count(), bucket_list.c_str()));
  const bool even = std::all_of(d.sent_by_rank.begin(), d.sent_by_rank.end(),
                                [&](int64_t b) { return b == d.sent_by_rank[0]; });
  std::string by_rank;
  for (int r = 0; r < W; ++r)
    by_rank += strf("%sr%d %lld", r ? ", " : "", r, (long long)d.sent_by_rank[r]);
  p.more(strf(
      "per step: %s%s bytes sent and as many received, against 2(W-1)/W x %lld gradient bytes "
      "= 2*%d/%d x %lld = %lld for one ring over the whole buffer%s",
      even ? "every rank " : "", even ? std::to_string(d.sent_by_rank[0]).c_str() : by_rank.c_str(),
      G, W - 1, W, G, (long long)d.ring_formula,
      even && d.sent_by_rank[0] == d.ring_formula
          ? ""
          : " (a rank sends every piece of a bucket but its own, then every piece but rank "
            "r+1's, and the pieces differ by up to one value)"));
  p.more(
      strf("plus %lld bytes of host scalars (the loss sum and two stop flags, as doubles). No "
           "logits or outputs are gathered anywhere: each rank's loss stays on its rank",
           (long long)d.host_sum_bytes));
  // How a ring moves them.
  {
    const auto [b0, b1] = d.buckets.front();
    std::string chunks;
    for (int q = 0; q < W; ++q) {
      auto [lo, hi] = chunk_of(b0, b1, W, q);
      chunks += strf("%sc%d [%lld, %lld) %lld bytes", q ? ", " : "", q, (long long)lo,
                     (long long)hi, (long long)((hi - lo) * 4));
    }
    p.line("ring",
           strf("a ring all-reduce is a reduce-scatter then an all-gather, W-1 = %d step%s each; "
                "at every step each rank sends one chunk (1/W of the bucket) to rank r+1 and "
                "receives one from rank r-1, so no link carries more than any other. Bucket #0 "
                "in %d chunks: %s",
                W - 1, W == 2 ? "" : "s", W, chunks.c_str()));
    narrate_steps(p, "reduce-scatter", ring_reduce_scatter_steps(W));
    p.more(
        strf("  (the receiver adds the chunk to its own; after step %d rank r holds the sum of "
             "chunk r over all ranks)",
             W - 1));
    narrate_steps(p, "all-gather", ring_all_gather_steps(W));
    p.more(strf("  (the receiver overwrites; after step %d every rank holds every summed chunk)",
                W - 1));
    p.more(
        strf("each rank sent %d chunks of the bucket: 2(W-1)/W of it. These are fanout's own "
             "rings over Gloo's connections, chunk for chunk as drawn here",
             2 * (W - 1)));
  }
  narrate_run(p, d, done);
  // Against the in-process modes measured above.
  const WalkthroughMode* faithful = find(done, "dp-output");
  const WalkthroughMode* z1 = find(done, "zero1");
  if (faithful) {
    p.line("compared",
           strf("dp-output (step 1 above): %s sent %lld bytes of weights, received %lld of "
                "gradients and gathered the logits (%zu bytes): every byte to or from one device, "
                "W-1 copies of the model each way. ddp's rank 0 sends %lld and receives as many, "
                "2(W-1)/W copies: at W = 8, 7 copies each way through %s against 1.75 per rank",
                o.devices[0].str().c_str(), (long long)faithful->weights_sent,
                (long long)faithful->sums_sent, faithful->gather_bytes,
                (long long)d.sent_by_rank[0], o.devices[0].str().c_str()));
  }
  if (z1) {
    p.more(strf(
        "zero1 moves the same two ring halves in one process (reduce-scatter of "
        "gradients, %lld bytes in all; all-gather of updated weights, %lld), keeping 1/W of the "
        "AdamW state per device; ddp all-gathers the summed gradients instead, and every "
        "rank runs the whole AdamW on its own %lld bytes of state",
        (long long)z1->sums_sent, (long long)z1->update_sent, (long long)d.optimizer_bytes));
  }
}

}  // namespace fanout::walkthrough::walk
