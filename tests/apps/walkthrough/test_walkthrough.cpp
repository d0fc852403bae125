// The walkthrough narrates the engine's real numbers: the uneven scatter of 5
// rows over 2 CPU devices with its byte counts, dp-output's (B, T, V) gather, P*4
// bytes of gradients, zero1's halved optimizer state, and losses that agree across
// modes, under the names bench and train use; then a ddp step (computed). Its
// summary compares warm steps: the median of several timed steps and their
// spread (step_times_summarize, checked on given samples).
// zero2 and zero3 quote their shards, the gradient bytes of zero1's reduce-scatter
// and (zero3) the weight gathers the units predict, and peaks per kind within the
// bounds of a shard plus 3 units in flight.
// The precision section's bytes come from the engine's counters: bf16 working
// weights travel in half the bytes, and so do bf16 gradient sums.
// Through the binary: exit 0, a timeline legend and a trace that parses as JSON;
// bad flags are one stderr line and a non-zero exit.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/walkthrough/walkthrough.h"
#include "apps/walkthrough/walkthrough_precision.h"
#include "models/llama_layout.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/file_limit_util.h"
#include "tests/apps/walkthrough/walkthrough_util.h"
#include "tests/engine/core/file_node_util.h"

using namespace fanout;
using namespace fanout::presentation;
using namespace fanout::walkthrough;

namespace {

bool has(const std::string& text, const std::string& what) {
  return test::unwrapped(text).find(what) != std::string::npos;
}

const WalkthroughMode& mode(const WalkthroughResult& r, const std::string& name) {
  for (const WalkthroughMode& m : r.modes)
    if (m.name == name) return m;
  FAIL("no mode " << name);
  return r.modes[0];
}

const WalkthroughPrecisionRun& run(const WalkthroughResult& r, const std::string& strategy,
                                   const std::string& precision, const std::string& grad_comm) {
  for (const WalkthroughPrecisionRun& p : r.precision)
    if (p.strategy == strategy && p.precision == precision && p.grad_comm == grad_comm) return p;
  FAIL("no precision run " << strategy << " " << precision << " " << grad_comm);
  return r.precision[0];
}

// The two byte counts the precision table printed on the row of `strategy` and
// `setting` ("bf16, --grad-comm bf16"), as the text reads them.
std::pair<long long, long long> table_bytes(const std::string& text, const std::string& strategy,
                                            const std::string& setting) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    size_t at = l.find_first_not_of(' ');
    if (at == std::string::npos || l.compare(at, strategy.size() + 1, strategy + " ") != 0)
      continue;
    at = l.find_first_not_of(' ', at + strategy.size());
    if (l.compare(at, setting.size() + 1, setting + " ") != 0) continue;
    std::istringstream nums(l.substr(at + setting.size()));
    long long replicate = -1, reduce = -1;
    if (nums >> replicate >> reduce) return {replicate, reduce};  // not "bf16" of "bf16, --grad..."
  }
  FAIL("no table row " << strategy << " " << setting);
  return {-1, -1};
}

// The summary's row of a mode: its name, median, IQR and min-max as printed.
std::string summary_row(const std::string& name, const StepTimes& t) {
  char buf[160], iqr[40], range[40];
  std::snprintf(iqr, sizeof iqr, "%.2f-%.2f ms", t.q1, t.q3);
  std::snprintf(range, sizeof range, "%.2f-%.2f ms", t.min, t.max);
  std::snprintf(buf, sizeof buf, "%-11s %7.2f ms %17s %17s", name.c_str(), t.median, iqr, range);
  return buf;
}

}  // namespace

TEST_CASE("the walkthrough narrates the real scatter gather and gradient bytes") {
  const int64_t T = 16;
  WalkthroughOptions o;
  o.devices = {cpu_device(0), cpu_device(1)};
  o.batch_size = 5;
  o.seq_len = T;
  o.steps = 2;
  std::ostringstream text;
  WalkthroughResult r = walkthrough_run(o, text);
  std::string s = text.str();
  CAPTURE(s);

  int64_t P = models::LlamaLayout(o.config).total(), V = o.config.vocab_size;
  CHECK(r.parameters == P);
  REQUIRE(r.modes.size() == 6);
  const WalkthroughMode& dp = mode(r, "dp-output");
  CHECK(dp.rows == std::vector<int64_t>{3, 2});
  CHECK(dp.scatter_bytes == std::vector<size_t>{3 * T * 4, 2 * T * 4});
  CHECK(has(s, "cpu:0 gets 3 rows (" + std::to_string(3 * T * 4) + " bytes of token ids)"));
  CHECK(has(s, "cpu:1 gets 2 rows (" + std::to_string(2 * T * 4) + " bytes)"));
  CHECK(dp.gather_bytes == static_cast<size_t>(5 * T * V * 4));
  CHECK(has(s, std::to_string(5 * T * V * 4) + " bytes (5*16*259*4)"));
  CHECK(dp.grad_bytes == static_cast<size_t>(P * 4));
  CHECK(has(s, std::to_string(P * 4) + " bytes (P*4)"));
  CHECK(has(s, "broadcast " + std::to_string(P) + " parameters"));
  CHECK(has(s, "legend:"));
  for (const char* title :
       {"1. dp-output (--strategy dp --loss-on output): what nn.DataParallel does",
        "2. dp (--strategy dp, the loss on the replicas)",
        "3. dp-overlap (--strategy dp --overlap)", "4. zero1", "5. zero2", "6. zero3",
        "7. ddp: one process per device", "8. precision"})
    CHECK(has(s, title));
  CHECK(!has(s, "dp-replicas"));
  CHECK(!has(s, "faithful dp"));
  // The ddp step, computed for these 2 devices: P*4 bytes per rank (2(W-1)/W = 1).
  CHECK(r.ddp.world == 2);
  CHECK(r.ddp.sent_by_rank == std::vector<int64_t>{P * 4, P * 4});
  CHECK(r.ddp.ring_formula == P * 4);
  CHECK(has(s, "every rank " + std::to_string(P * 4) +
                   " bytes sent and as many received, against 2(W-1)/W x " + std::to_string(P * 4) +
                   " gradient bytes = 2*1/2 x " + std::to_string(P * 4) + " = " +
                   std::to_string(P * 4) + " for one ring over the whole buffer"));
  CHECK(has(s, "reduce-scatter step 1: r0 -> r1 c1, r1 -> r0 c0"));
  // Warm timing: every mode's timed steps, summarised in its own line and the summary.
  CHECK(has(s,
            "summary (step time: median of each mode's warm, untraced timed steps, with the "
            "IQR q1-q3 and min-max"));
  for (const WalkthroughMode& m : r.modes) {
    CAPTURE(m.name);
    REQUIRE(m.timed_ms.size() == static_cast<size_t>(o.timed_steps));
    const StepTimes t = step_times_summarize(m.timed_ms);
    CHECK(t.min <= t.median);
    CHECK(t.median <= t.max);
    CHECK(has(s, step_times_str(t)));
    CHECK(has(s, summary_row(m.name, t)));
  }
}

TEST_CASE("step times summarise as the median, the quartiles and the extremes of the samples") {
  StepTimes odd = step_times_summarize({5, 1, 4, 2, 3});
  CHECK(odd.samples == 5);
  CHECK(odd.median == 3);
  CHECK(odd.q1 == 2);
  CHECK(odd.q3 == 4);
  CHECK(odd.min == 1);
  CHECK(odd.max == 5);
  CHECK(step_times_str(odd) == "3.00 ms (IQR 2.00-4.00, min-max 1.00-5.00 ms, 5 steps)");
  // Even counts interpolate (numpy.percentile's default): 10 20 30 40.
  StepTimes even = step_times_summarize({40, 10, 30, 20});
  CHECK(even.median == 25);
  CHECK(even.q1 == 17.5);
  CHECK(even.q3 == 32.5);
  // One slow step (a cold cache, a busy core) moves the extremes, not the median.
  StepTimes outlier = step_times_summarize({4, 4, 4, 4, 100});
  CHECK(outlier.median == 4);
  CHECK(outlier.q3 == 4);
  CHECK(outlier.max == 100);
  StepTimes one = step_times_summarize({7});
  CHECK((one.samples == 1 && one.median == 7 && one.q1 == 7 && one.q3 == 7 && one.max == 7));
  CHECK(step_times_str(one) == "7.00 ms (IQR 7.00-7.00, min-max 7.00-7.00 ms, 1 step)");
  CHECK(step_times_summarize({}).samples == 0);
}

TEST_CASE("walkthrough modes agree on the loss and differ in memory as narrated") {
  WalkthroughOptions o;
  o.devices = {cpu_device(0), cpu_device(1)};
  o.seq_len = 16;
  std::ostringstream text;
  WalkthroughResult r = walkthrough_run(o, text);
  const WalkthroughMode& dp = mode(r, "dp-output");
  const WalkthroughMode& replicas = mode(r, "dp");
  const WalkthroughMode& overlap = mode(r, "dp-overlap");
  const WalkthroughMode& zero1 = mode(r, "zero1");
  for (const WalkthroughMode* m :
       {&replicas, &overlap, &zero1, &mode(r, "zero2"), &mode(r, "zero3")}) {
    CAPTURE(m->name);
    REQUIRE(m->losses.size() == dp.losses.size());
    for (size_t i = 0; i < dp.losses.size(); ++i)
      CHECK(m->losses[i] == doctest::Approx(dp.losses[i]).epsilon(1e-4));
  }
  // AdamW state: all of it on the primary with dp, half per device with zero1.
  int64_t P = r.parameters;
  REQUIRE(dp.optimizer_bytes.size() == 2);
  CHECK(dp.optimizer_bytes[0] >= static_cast<size_t>(2 * P * 4));
  CHECK(dp.optimizer_bytes[1] == 0);
  REQUIRE(zero1.optimizer_bytes.size() == 2);
  for (size_t b : zero1.optimizer_bytes) {
    double ratio = static_cast<double>(b) / static_cast<double>(dp.optimizer_bytes[0]);
    CHECK(ratio == doctest::Approx(0.5).epsilon(0.01));
  }
  // No (B, T, V) gather with the loss on the replicas: the primary's comm peak
  // drops by at least the gathered bytes.
  CHECK(replicas.gather_bytes == 0);
  CHECK(dp.memory[0].tag(MemTag::comm) >= replicas.memory[0].tag(MemTag::comm) + dp.gather_bytes);
  CHECK(overlap.buckets > 1);
  CHECK(has(text.str(), std::to_string(overlap.buckets) + " buckets"));
}

TEST_CASE("walkthrough zero2 and zero3 quote their shards, reductions and gathers from the run") {
  WalkthroughOptions o;
  o.devices = {cpu_device(0), cpu_device(1)};
  o.batch_size = 5;
  o.seq_len = 8;
  o.steps = 1;
  std::ostringstream text;
  WalkthroughResult r = walkthrough_run(o, text);
  const std::string s = text.str();
  CAPTURE(s);
  const int64_t P = r.parameters;
  const models::LlamaLayout layout(o.config);
  const int64_t L = o.config.num_hidden_layers;
  const int64_t layers = layout.layer(L - 1).end - layout.layer(0).begin;
  const WalkthroughMode &zero1 = mode(r, "zero1"), &zero2 = mode(r, "zero2"),
                        &zero3 = mode(r, "zero3"), &dp = mode(r, "dp");
  auto str = [](int64_t v) { return std::to_string(v); };
  // Shards: two halves of the flat buffer, quoted in elements.
  for (const WalkthroughMode* m : {&zero1, &zero2, &zero3}) {
    CAPTURE(m->name);
    REQUIRE(m->shard_elements.size() == 2);
    CHECK(m->shard_elements[0] + m->shard_elements[1] == P);
  }
  const int64_t s0 = zero3.shard_elements[0];
  CHECK(
      has(s, "cpu:0 owns " + str(s0) + " elements in " + str(L + 2) + " pieces, one of each unit"));
  CHECK(zero2.units == L + 2);
  CHECK(has(s, str(L + 2) + " units, in forward order"));
  // Gradient sums: the bytes of zero1's reduce-scatter, cut per unit.
  CHECK(zero1.sums_sent == P * 4);
  CHECK(zero2.sums_sent == zero1.sums_sent);
  CHECK(zero3.sums_sent == zero1.sums_sent);
  CHECK(has(s, str(zero2.sums_sent) + " bytes of gradients crossed devices, as many as zero1's"));
  // Weights: zero1/zero2 all-gather the update; zero3 gathers every unit in
  // forward and the layers again in backward, and sends nothing after its update.
  CHECK(zero2.update_sent == P * 4);
  CHECK(zero2.update_sent == zero1.update_sent);
  CHECK(zero3.update_sent == 0);
  CHECK(zero3.gather_forward == P * 4);
  CHECK(zero3.gather_backward == layers * 4);
  CHECK(zero3.weights_sent == zero3.gather_forward + zero3.gather_backward);
  CHECK(has(s, str(zero3.weights_sent) +
                   " bytes of weights crossed devices for this step's gathers (what the units "
                   "predict, to the byte): " +
                   str(P * 4) + " in forward"));
  // Memory per device: a shard plus at most 2 unit buffers in flight.
  std::vector<int64_t> units = {layout.layer(0).begin};
  for (int64_t l = 0; l < L; ++l) units.push_back(layout.layer(l).end - layout.layer(l).begin);
  units.push_back(P - layout.layer(L - 1).end);
  std::sort(units.rbegin(), units.rend());
  const size_t in_flight = static_cast<size_t>(units[0] + units[1]) * 4;
  for (size_t d = 0; d < 2; ++d) {
    CAPTURE(d);
    const size_t shard = static_cast<size_t>(zero3.shard_elements[d]) * 4;
    CHECK(zero2.memory[d].tag(MemTag::grads) >= shard);
    CHECK(zero2.memory[d].tag(MemTag::grads) <= shard + in_flight);
    CHECK(zero2.memory[d].tag(MemTag::params) == dp.memory[d].tag(MemTag::params));
    CHECK(zero3.memory[d].tag(MemTag::params) >= shard);
    CHECK(zero3.memory[d].tag(MemTag::params) <= shard + in_flight);
    CHECK(zero3.memory[d].tag(MemTag::params) > 0);
    // AdamW's m and v for the same number of elements (zero2/zero3 keep one
    // 4-byte norm scratch per piece, zero1 one per shard).
    for (const WalkthroughMode* m : {&zero2, &zero3}) {
      CHECK(m->memory[d].tag(MemTag::optimizer) >= zero1.memory[d].tag(MemTag::optimizer));
      CHECK(m->memory[d].tag(MemTag::optimizer) <=
            zero1.memory[d].tag(MemTag::optimizer) + 4 * static_cast<size_t>(L + 2));
    }
  }
  CHECK(has(s, "grads peak per device cpu:0 " + bytes_str(zero2.memory[0].tag(MemTag::grads))));
  CHECK(has(s, "params peak per device cpu:0 " + bytes_str(zero3.memory[0].tag(MemTag::params))));
}

TEST_CASE("fanout walkthrough exits 0 prints the legend and writes a trace that parses") {
  std::string dir = test::make_temp_dir("fanout-walk");
  std::string trace = dir + "/trace.json";
  auto r = test::run_fanout({"walkthrough", "--devices", "cpu:0,cpu:1", "--batch-size", "5",
                             "--seq-len", "8", "--steps", "1", "--trace", trace, "--no-color"});
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  CHECK(r.err.empty());
  CHECK(has(r.out, "legend:"));
  CHECK(has(r.out, "cpu:0 gets 3 rows (96 bytes of token ids)"));
  CHECK(has(r.out, "written to " + trace));
  CHECK(has(r.out, "5 timed steps per mode after its 1 narrated (warm-up) step;"));
  CHECK(r.out.find('\033') == std::string::npos);
  std::ifstream in(trace);
  REQUIRE(in.good());
  nlohmann::json doc = nlohmann::json::parse(in);
  REQUIRE(doc.contains("traceEvents"));
  bool forward = false, backward = false;
  for (const auto& e : doc["traceEvents"]) {
    forward = forward || e.value("name", "") == "forward";
    backward = backward || e.value("name", "") == "backward";
  }
  CHECK(forward);
  CHECK(backward);
  std::filesystem::remove_all(dir);
}

TEST_CASE("fanout walkthrough rejects bad flags with one line and a non-zero exit") {
  std::string dir = test::make_temp_dir("fanout-walk");
  std::string trace = dir + "/t.json";
  struct Bad {
    std::string flag, value, says;  // `says`: part of the one error line
  };
  for (const Bad& bad : std::vector<Bad>{
           {"--devices", "gpu:0", "gpu:0"},
           {"--batch-size", "0", "--batch-size"},
           {"--seq-len", "0", "--seq-len"},
           {"--steps", "0", "--steps"},
           {"--seq-len", "5000", "exceeds max_position_embeddings"},
           {"--trace", dir + "/no/such/dir/t.json", "does not exist"},
           {"--trace", "", "--trace: an empty string is not a file name"},
           {"--batch-size", "", "--batch-size: an empty value is not a number"},
           // 2^60 died of SIGFPE (an overflowed B*T) before the range check.
           {"--batch-size", "1152921504606846976", "--batch-size: '1152921504606846976' is out"},
           {"--batch-size", "1000000000", "a batch of 1000000000 x 32 tokens needs at least"},
           {"--seq-len", "", "--seq-len: an empty value"},
           {"--seq-len", "x", "--seq-len: 'x' is not a whole number"},
           {"--steps", "", "--steps: an empty value"},
           {"--steps", "inf", "--steps: 'inf' is not a whole number"},
           {"--steps", "3000000000", "--steps: '3000000000' is out of range"},
           {"--timed-steps", "0", "--timed-steps"},
           {"--timed-steps", "", "--timed-steps: an empty value"},
       }) {
    std::vector<std::string> cmd = {"walkthrough"};
    if (bad.flag != "--trace") cmd.insert(cmd.end(), {"--trace", trace});
    cmd.insert(cmd.end(), {bad.flag, bad.value});
    CAPTURE(bad.flag);
    CAPTURE(bad.value);
    auto r = test::run_fanout(cmd, "timeout 60");
    CAPTURE(r.err);
    CHECK(r.rc != 0);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, bad.says));
    CHECK(r.out.empty());
  }
  CHECK(!std::filesystem::exists(trace));
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "fanout walkthrough refuses a FIFO, device, symlink or directory as --trace before running") {
  test::TempDir dir("fanout-walk");
  for (const test::FileNode& node : test::make_file_nodes(dir.path)) {
    CAPTURE(node.kind);
    const std::string before = test::file_node_identity(node.path);
    auto r = test::run_fanout({"walkthrough", "--devices", "cpu:0", "--batch-size", "1",
                               "--seq-len", "4", "--steps", "1", "--trace", node.path},
                              "timeout 60");
    CHECK(r.rc == 1);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, "--trace " + node.path + ": is " + node.kind));
    CHECK(r.out.empty());  // before the narration started
    CHECK(test::file_node_identity(node.path) == before);
  }
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("a walkthrough trace that cannot be written (a full disk) fails in one line, no file") {
  test::TempDir dir("fanout-walk");
  auto r =
      test::run_fanout_file_limited({"walkthrough", "--devices", "cpu:0", "--batch-size", "1",
                                     "--seq-len", "4", "--steps", "1", "--trace", dir / "t.json"},
                                    true);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, dir / "t.json: cannot write: File too large"));
  CHECK(!std::filesystem::exists(dir / "t.json"));
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("the precision section measures half the bytes for bf16 weights and bf16 gradient sums") {
  WalkthroughOptions o;
  o.devices = {cpu_device(0), cpu_device(1)};
  o.batch_size = 5;
  o.seq_len = 16;
  o.steps = 1;
  std::ostringstream text;
  WalkthroughResult r = walkthrough_run(o, text);
  std::string s = text.str();
  CAPTURE(s);
  CHECK(has(s, "8. precision: what bf16 changes"));
  REQUIRE(r.precision.size() == 6);
  const long long P = r.parameters;
  for (const char* strategy : {"dp", "zero1"}) {
    CAPTURE(strategy);
    const WalkthroughPrecisionRun& f = run(r, strategy, "fp32", "fp32");
    const WalkthroughPrecisionRun& b = run(r, strategy, "bf16", "fp32");
    const WalkthroughPrecisionRun& g = run(r, strategy, "bf16", "bf16");
    // Two distinct devices: one copy of the weights (dp's broadcast to cpu:1, or
    // zero1's two half shards) and one of the gradients cross per step.
    CHECK(f.replicate_bytes == P * 4);
    CHECK(b.replicate_bytes * 2 == f.replicate_bytes);  // bf16 working weights travel
    CHECK(g.replicate_bytes == b.replicate_bytes);
    CHECK(f.reduce_bytes == P * 4);
    CHECK(b.reduce_bytes == f.reduce_bytes);  // gradients stay fp32 under --precision
    CHECK(g.reduce_bytes * 2 == b.reduce_bytes);
    // The table quotes the counters.
    for (const WalkthroughPrecisionRun* p : {&f, &b, &g}) {
      std::string setting = p->precision + (p->grad_comm == "bf16" ? ", --grad-comm bf16" : "");
      auto [replicate, reduce] = table_bytes(s, strategy, setting);
      CHECK(replicate == p->replicate_bytes);
      CHECK(reduce == p->reduce_bytes);
    }
  }
  const WalkthroughPrecisionRun& f = run(r, "dp", "fp32", "fp32");
  const WalkthroughPrecisionRun& b = run(r, "dp", "bf16", "fp32");
  const WalkthroughPrecisionRun& g = run(r, "dp", "bf16", "bf16");
  // Step 1 sent the fresh fp32 master whatever the precision.
  CHECK(f.first_replicate_bytes == P * 4);
  CHECK(b.first_replicate_bytes == P * 4);
  auto str = [](long long v) { return std::to_string(v); };
  CHECK(has(s, "the working weights, " + str(b.replicate_bytes) + " bytes (P*2), vs " +
                   str(f.replicate_bytes) + " (P*4) in fp32: exactly half"));
  CHECK(has(s, str(b.reduce_bytes) + " bytes (P*4) in both"));
  CHECK(has(s, str(g.reduce_bytes) + " bytes (P*2), exactly half"));
  // Memory: the fp32 master plus the bf16 working copy; the rest of the arena shrinks.
  for (size_t d = 0; d < 2; ++d) {
    CHECK(f.memory[d].tag(MemTag::params) == static_cast<size_t>(P * 4));
    CHECK(b.memory[d].tag(MemTag::params) == static_cast<size_t>(P * 6));
    CHECK(b.memory[d].tag(MemTag::grads) == f.memory[d].tag(MemTag::grads));
    CHECK(b.memory[d].tag(MemTag::activations) < f.memory[d].tag(MemTag::activations));
  }
  CHECK(has(s, "params " + str(P * 4) + " -> " + str(P * 6) + " bytes on cpu:0 (P*4 -> P*6)"));
  // bf16 is close to fp32, not the same; bf16 gradient sums change nothing before step 2.
  REQUIRE(f.losses.size() == 2);
  REQUIRE(b.losses.size() == 2);
  REQUIRE(g.losses.size() == 2);
  for (size_t i = 0; i < 2; ++i) CHECK(b.losses[i] == doctest::Approx(f.losses[i]).epsilon(1e-2));
  CHECK(b.losses[0] != f.losses[0]);
  CHECK(g.losses[0] == b.losses[0]);
}
