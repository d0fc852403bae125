#pragma once
// What `fanout walkthrough --html` draws, section by section: the devices of one
// mode with what each holds (peak bytes by kind from the allocators), the moves
// of one step between them (each labelled with the engine's own byte counter
// over that step), the step's trace spans, its throughput and two or three
// sentences of explanation. walkthrough_sections() reads them off a run's
// WalkthroughResult; walkthrough_html.h renders them.

#include <cstdint>
#include <string>
#include <vector>

#include "apps/presentation/device_peak.h"
#include "apps/walkthrough/walkthrough.h"

namespace fanout::walkthrough {

// One arrow group of a diagram: what moved from whom to whom during the step.
struct PageMove {
  static constexpr int kHost = -1;
  std::string kind;           // scatter, broadcast, gather, reduce, reduce-scatter, all-gather, ...
  std::string what;           // "weights", "gradients", "token ids", ...
  std::vector<int> from, to;  // box indexes (kHost: the host); a box in both sends and receives
  int64_t bytes = 0;          // over the step
  std::string counter;        // where `bytes` comes from, one phrase
};

// One device box: a replica, a stage, a tensor-parallel rank or a process.
struct PageBox {
  std::string label;  // "replica 0", "stage 1", "rank 0"
  std::string device;
  std::string role;  // "primary", "layers 0-1 + head", ""
};

struct PageSection {
  std::string id, name, title;  // the anchor ("zero3"), the mode's name and heading
  std::string flags;            // the fanout train command line that selects it
  std::vector<std::string> explain;
  std::vector<PageBox> boxes;
  std::vector<presentation::DevicePeak> memory;  // per distinct device (boxes share them)
  std::vector<PageMove> moves;
  WalkthroughStepTrace step;     // the drawn step's spans
  int step_number = 1;           // which step that is
  int64_t tokens_per_step = 0;   // the global batch's tokens
  std::vector<double> timed_ms;  // warm, untraced steps (tokens/s from their median)
  double loss = 0;               // the drawn step's
  std::string note;              // a line under the diagram (why something did not run)
  int64_t bytes_moved() const;   // the moves between devices (not the host's scatter)
  double tokens_per_s() const;   // 0 without timed steps
};

// The page's sections for a run, in the walkthrough's order: the data-parallel
// modes, ddp (when it ran), the pipeline schedules, tensor parallelism (when
// the model splits).
std::vector<PageSection> walkthrough_sections(const WalkthroughResult& r,
                                              const WalkthroughOptions& o);

}  // namespace fanout::walkthrough
