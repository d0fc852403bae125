#pragma once
// The walkthrough's narrator: its shared state (the model's layout, the
// devices, the corpus) and the narration of one mode, step by step. Internal
// to apps/walkthrough: walkthrough.cpp runs the modes (Narrator::run),
// walkthrough_steps.cpp says what each phase of a narrated step did.

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "apps/data/corpus.h"
#include "apps/data/data_loader.h"
#include "apps/presentation/trace_timeline.h"
#include "apps/train/training.h"
#include "apps/walkthrough/walkthrough.h"
#include "apps/walkthrough/walkthrough_prose.h"
#include "apps/walkthrough/walkthrough_zero.h"
#include "engine/core/trace.h"
#include "engine/parallel/data_parallel.h"
#include "models/llama_layout.h"

namespace fanout::walkthrough::walk {

using Clock = std::chrono::steady_clock;
using ModeSpec = parallel::Mode;
using parallel::DataParallel;
using parallel::PhaseTimes;

std::string us_ms(int64_t us);
std::string shape(std::initializer_list<int64_t> dims);
// Spans that began in [t0, t1].
std::vector<TraceSpan> spans_between(int64_t t0, int64_t t1);
// o.timing_warmup untraced steps of `training` on the loader's next batches
// (numbered from `first_step`), then o.timed_steps timed ones: their wall
// times in milliseconds. Leaves the recorder disabled.
std::vector<double> time_steps(const WalkthroughOptions& o, train::Training& training,
                               data::DataLoader& loader, int64_t first_step);
// Total microseconds of the spans called `name` on `lane`.
int64_t span_us(const std::vector<TraceSpan>& spans, const std::string& lane,
                const std::string& name);

// The walkthrough's shared state and the narration of one mode.
class Narrator : public Prose {
 public:
  Narrator(const WalkthroughOptions& o, std::ostream& out)
      : Prose(out, o.color, o.width),
        o_(o),
        layout_(o.config),
        P_(layout_.total()),
        V_(o.config.vocab_size) {
    for (const Device& d : o.devices) {
      bool seen = false;
      for (const Device& e : distinct_) seen = seen || e == d;
      if (!seen) distinct_.push_back(d);
    }
    data::Corpus corpus = data::default_corpus();
    data_ = data::corpus_token_data(corpus.train_documents, "<embedded default corpus: train>");
  }

  int64_t parameters() const { return P_; }
  const data::TokenData& data() const { return data_; }
  void intro();
  WalkthroughMode run(const ModeSpec& spec, const std::vector<WalkthroughMode>& done);
  // The modes' warm step times and memory; ddp's too when it ran.
  void summary(const std::vector<WalkthroughMode>& modes, const WalkthroughDdp& ddp);

 private:
  std::string dev(int r) const { return o_.devices[r].str(); }
  std::string lane(int r, const std::string& what) const {
    return parallel::replica_lane(o_.devices, r, what);
  }
  std::string param_at(int64_t element) const {
    for (const models::ParamInfo& p : layout_.params())
      if (element >= p.offset && element < p.offset + p.numel)
        return p.name.rfind("model.", 0) == 0 ? p.name.substr(6) : p.name;
    return "?";
  }
  std::vector<AllocatorStats> device_stats() const {
    std::vector<AllocatorStats> s;
    for (const Device& d : distinct_) s.push_back(allocator_for(d).stats());
    return s;
  }
  // The timeline's bar columns: o_.timeline_width, fewer where the lanes' labels
  // and the bars would pass the width.
  int timeline_fit(const std::vector<TraceSpan>& spans) const {
    if (width_ == 0) return o_.timeline_width;
    size_t label = 4;
    for (const std::string& l : presentation::timeline_lanes(spans))
      label = std::max(label, l.size());
    const int room = static_cast<int>(width_) - static_cast<int>(label) - 5;
    return std::max(10, std::min(o_.timeline_width, room));
  }
  int distinct_index(Device d) const {
    for (size_t i = 0; i < distinct_.size(); ++i)
      if (distinct_[i] == d) return static_cast<int>(i);
    return 0;
  }

  void narrate_forward_backward(const ModeSpec& spec, WalkthroughMode& m, const data::Batch& b,
                                const parallel::LossStats& st, const PhaseTimes& t,
                                const std::vector<TraceSpan>& spans);
  void narrate_reduce(const ModeSpec& spec, WalkthroughMode& m, DataParallel& dp,
                      const PhaseTimes& t, int64_t step_t0, const std::vector<TraceSpan>& spans,
                      const std::vector<WalkthroughMode>& done);
  walk::ZeroRun zero_run(const ModeSpec& spec, DataParallel& dp) const {
    return {spec.strategy, o_.devices, dp.shards(), dp.primary().units(), 4};  // fp32 weights
  }
  void narrate_memory(WalkthroughMode& m, const std::vector<AllocatorStats>& base);
  void say_plan(const ModeSpec& spec, DataParallel& dp, WalkthroughMode& m);
  void run_step(const ModeSpec& spec, train::Training& training, const data::Batch& b, int step,
                const std::vector<AllocatorStats>& base, const std::vector<WalkthroughMode>& done,
                WalkthroughMode& m);
  void narrate_update(const ModeSpec& spec, const WalkthroughMode& m, const PhaseTimes& all,
                      const PhaseTimes& red, double norm, float lr);
  // After the narration: timing_warmup untraced steps, then timed_steps timed ones.
  std::string warmup_str() const {
    return o_.timing_warmup > 0 ? strf(" and %d more", o_.timing_warmup) : "";
  }
  void time_warm_steps(train::Training& training, data::DataLoader& loader, WalkthroughMode& m);
  void compare(const ModeSpec& spec, const WalkthroughMode& m,
               const std::vector<WalkthroughMode>& done);

  const WalkthroughOptions& o_;
  models::LlamaLayout layout_;
  int64_t P_, V_;
  std::vector<Device> distinct_;
  data::TokenData data_;
  double plain_wait_ = 0, overlap_wait_ = 0;  // step 1's reduce, without and with --overlap
  walk::ZeroRun zero_run_;                    // the mode that runs now
};

}  // namespace fanout::walkthrough::walk
