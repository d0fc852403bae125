// The walkthrough's ddp step run for real, its ranks as threads with their own
// Gloo groups: each rank sends exactly the computed bytes, the global losses are
// one device's on the same batches, the last step's spans hold every rank's
// lanes, each device's memory is measured, and a step that cannot run here (one
// device, a device twice, CUDA devices) is refused in a sentence, not thrown.

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "apps/data/corpus.h"
#include "apps/data/data_loader.h"
#include "apps/train/training.h"
#include "apps/walkthrough/walkthrough_ddp.h"
#include "apps/walkthrough/walkthrough_ddp_run.h"
#include "engine/core/trace.h"
#include "engine/parallel/strategy.h"
#include "models/llama_layout.h"
#include "models/llama_model.h"
#include "tests/apps/walkthrough/walkthrough_util.h"

using namespace fanout;
using namespace fanout::walkthrough;

namespace {

data::TokenData corpus_data() {
  data::Corpus corpus = data::default_corpus();
  return data::corpus_token_data(corpus.train_documents, "<embedded default corpus: train>");
}

WalkthroughOptions options_on(std::vector<Device> devices) {
  WalkthroughOptions o;
  o.devices = std::move(devices);
  o.batch_size = 5, o.seq_len = 32, o.steps = 2, o.timed_steps = 1;
  o.config = walkthrough_config();
  return o;
}

WalkthroughDdp computed(const WalkthroughOptions& o) {
  const int64_t P = models::LlamaLayout(o.config).total();
  return walk::ddp_step_compute(P, static_cast<int>(o.devices.size()), o.batch_size, o.bucket_mb);
}

// The losses of the same steps on one device: dp over cpu:0 alone, the same weights and batches.
std::vector<double> one_device_losses(const WalkthroughOptions& o, const data::TokenData& data) {
  train::TrainingOptions options;
  options.config = o.config;
  options.devices = {cpu_device(0)};
  train::training_options_set_mode(options, *parallel::mode_find("dp"));
  train::Training training(options, train::InitialWeights{});
  data::DataLoader loader(data, o.batch_size, o.seq_len, true, false, 0, models::kIgnoreIndex);
  std::vector<double> losses;
  for (int step = 1; step <= o.steps; ++step) {
    const data::Batch b = loader.next();
    parallel::HostBatch hb{b.B, b.T, b.inputs.data(), b.targets.data()};
    const train::Training::StepResult r =
        training.step(hb, static_cast<double>(b.counted()), step, training.options().adam.lr, 1.0);
    losses.push_back(r.loss.loss_sum / static_cast<double>(r.loss.count));
  }
  return losses;
}

// The narration with its line breaks and their indents read as one space.
std::string narration(const WalkthroughOptions& o, const WalkthroughDdp& d) {
  std::ostringstream text;
  walk::ddp_narrate(o, d, {}, 7, text);
  return test::unwrapped(text.str());
}

}  // namespace

TEST_CASE("a real ddp step over two CPU ranks sends the computed bytes and one device's losses") {
  const data::TokenData data = corpus_data();
  const WalkthroughOptions o = options_on({cpu_device(0), cpu_device(1)});
  WalkthroughDdp d = computed(o);
  REQUIRE(d.buckets.size() > 1);  // several all-reduces per step, each counted
  const bool was = Trace::global().enabled();
  walk::ddp_step_run(o, data, d);
  CHECK(Trace::global().enabled() == was);
  REQUIRE(d.ran);
  CHECK(d.refused.empty());
  CHECK(d.sent_by_rank[0] > 0);
  CHECK(d.measured_sent == d.sent_by_rank);

  const std::vector<double> ref = one_device_losses(o, data);
  REQUIRE(d.losses.size() == 2);
  CHECK(d.losses[0] != d.losses[1]);  // step 2 runs on updated weights and another batch
  for (size_t s = 0; s < ref.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(d.losses[s] - ref[s]) <= 1e-5);
  }

  // The last step's spans: each rank's own lanes, the same step on each, and
  // nothing of the step before it or the timed one after it.
  CHECK(d.last.t0_us < d.last.t1_us);
  std::map<std::string, std::multiset<std::string>> names;  // lane -> span names
  for (const TraceSpan& s : d.last.spans) {
    CHECK(s.begin_us >= d.last.t0_us);
    CHECK(s.begin_us <= d.last.t1_us);
    names[s.lane].insert(s.name);
  }
  std::string lanes;
  for (const auto& [lane, n] : names) lanes += lane + " (" + std::to_string(n.size()) + ") ";
  CAPTURE(lanes);
  REQUIRE(names.count("cpu:0 compute") == 1);
  REQUIRE(names.count("cpu:1 compute") == 1);
  CHECK(names["cpu:0 compute"] == names["cpu:1 compute"]);
  CHECK(names["cpu:0 compute"].count("forward") == 1);
  CHECK(names["cpu:0 compute"].count("backward") == 1);
  // Each rank's Gloo all-reduces: one "reduce" span per bucket on its comm lane.
  CHECK(names["cpu:0 comm"].count("reduce") == d.buckets.size());
  CHECK(names["cpu:1 comm"].count("reduce") == d.buckets.size());
  for (const auto& [lane, n] : names) {
    if (lane.rfind("cpu:0 ", 0) != 0) continue;
    const std::string other = "cpu:1 " + lane.substr(6);
    CAPTURE(lane);
    REQUIRE(names.count(other) == 1);
    CHECK(names[other].size() == n.size());
  }

  // The timed steps ran untraced: no span of this run began after the window.
  int late = 0;
  for (const TraceSpan& s : Trace::global().spans()) late += s.begin_us > d.last.t1_us;
  CHECK(late == 0);

  REQUIRE(d.memory.size() == 2);
  CHECK(d.memory[0].device == "cpu:0");
  CHECK(d.memory[1].device == "cpu:1");
  // Each rank holds whole weights and gradients, and the token ids of its own rows
  // only (inputs and targets, int32): 3 rows on cpu:0, 2 on cpu:1.
  for (size_t r = 0; r < d.memory.size(); ++r) {
    const presentation::DevicePeak& p = d.memory[r];
    CAPTURE(p.device);
    CHECK(p.peak_bytes >= static_cast<size_t>(d.weight_bytes + d.optimizer_bytes));
    CHECK(p.tag(MemTag::params) == static_cast<size_t>(d.weight_bytes));
    CHECK(p.tag(MemTag::grads) == static_cast<size_t>(d.grad_bytes));
    CHECK(p.tag(MemTag::data) == static_cast<size_t>(d.rows[r].second * o.seq_len * 2 * 4));
  }
  REQUIRE(d.timed_ms.size() == 1);
  CHECK(d.timed_ms[0] > 0);

  // The narration sets the measured bytes beside the computed ones.
  const std::string flat = narration(o, d);
  CAPTURE(flat);
  const std::string sent = std::to_string(d.sent_by_rank[0]);
  CHECK(flat.find("r0 " + sent + ", r1 " + sent + ", exactly the figures computed above") !=
        std::string::npos);
  CHECK(flat.find("computed, not run") == std::string::npos);
}

TEST_CASE("a real ddp step over three CPU ranks: every rank sends the computed bytes") {
  const data::TokenData data = corpus_data();
  WalkthroughOptions o = options_on({cpu_device(0), cpu_device(1), cpu_device(2)});
  o.steps = 1, o.timed_steps = 0;
  WalkthroughDdp d = computed(o);
  // The recorder's state comes back as it was, on as well as off.
  Trace::global().set_enabled(true);
  walk::ddp_step_run(o, data, d);
  const bool still_on = Trace::global().enabled();
  Trace::global().set_enabled(false);
  CHECK(still_on);
  REQUIRE(d.ran);
  // Over 3 ranks the pieces differ by a value, and so do the ranks' bytes.
  CHECK(d.sent_by_rank[0] != d.sent_by_rank[1]);
  CHECK(d.measured_sent == d.sent_by_rank);
  CHECK(d.losses.size() == 1);
  CHECK(d.memory.size() == 3);
  CHECK(d.timed_ms.empty());
}

TEST_CASE("a ddp step that cannot run as CPU threads is refused in a sentence, not thrown") {
  const data::TokenData data = corpus_data();
  const Device cuda0{DeviceKind::cuda, 0}, cuda1{DeviceKind::cuda, 1};
  struct Case {
    std::vector<Device> devices;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{cpu_device(0)}, "two or more distinct CPU devices"},
      {{cpu_device(0), cpu_device(0)}, "cpu:0 is listed twice"},
      {{cuda0, cuda1}, "cuda:0 is a CUDA device"},
      {{cpu_device(0), cuda0}, "cuda:0 is a CUDA device"},
  };
  for (const Case& c : cases) {
    const WalkthroughOptions o = options_on(c.devices);
    CAPTURE(devices_str(o.devices));
    WalkthroughDdp d = computed(o);
    const bool was = Trace::global().enabled();
    CHECK_NOTHROW(walk::ddp_step_run(o, data, d));
    CHECK(Trace::global().enabled() == was);
    CHECK_FALSE(d.ran);
    CHECK(d.refused.find(c.says) != std::string::npos);
    CHECK(d.refused.find('\n') == std::string::npos);
    CHECK(d.measured_sent.empty());
    CHECK(d.losses.empty());
    const std::string flat = narration(o, d);
    CAPTURE(flat);
    CHECK(flat.find("this step was computed, not run: " + d.refused) != std::string::npos);
  }
}

TEST_CASE(
    "an error in the ddp ranks comes back to the caller, naming the rank, recorder restored") {
  const data::TokenData data = corpus_data();
  WalkthroughOptions o = options_on({cpu_device(0), cpu_device(1)});
  o.seq_len = 100000000;  // more tokens than the corpus holds: every rank's loader refuses
  WalkthroughDdp d = computed(o);
  const bool was = Trace::global().enabled();
  CHECK_THROWS_WITH_AS(walk::ddp_step_run(o, data, d),
                       doctest::Contains("the walkthrough's ddp rank"), Error);
  CHECK(Trace::global().enabled() == was);
  CHECK_FALSE(d.ran);
}
