#pragma once
// The walkthrough's pipeline section: the same model cut into stages (one per
// device, two on one device), one 1F1B step on the modes' first batch, its
// schedule drawn as a stage x time grid, the bubble measured from the trace
// next to the schedule's own, the bytes that crossed stage boundaries and the
// loss against dp's on the same batch.

#include <ostream>
#include <vector>

#include "apps/data/token_file.h"
#include "apps/walkthrough/walkthrough.h"

namespace fanout::walkthrough::walk {

// Prints section `index` to `out`; dp_loss: dp's first-step loss on the same
// batch and weights (the modes' runs), which the pipeline's must equal. Runs
// the step under gpipe, 1f1b and zb1 (appended to `schedules`, in that order)
// and narrates 1F1B's, which it returns.
WalkthroughPipeline walkthrough_pipeline(const WalkthroughOptions& o, const data::TokenData& data,
                                         double dp_loss, int index, std::ostream& out,
                                         std::vector<WalkthroughPipeline>& schedules);

}  // namespace fanout::walkthrough::walk
