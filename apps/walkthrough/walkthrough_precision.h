#pragma once
// The walkthrough's precision section: dp and zero1 once more in fp32,
// in bf16 mixed precision and with bf16 gradient sums, narrated from the
// engine's byte counters (DataParallel::comm_bytes) and the allocators' stats.

#include <ostream>
#include <vector>

#include "apps/data/token_file.h"
#include "apps/walkthrough/walkthrough.h"

namespace fanout::walkthrough::walk {

// Prints section `index` to `out` and returns its runs: fp32, bf16, bf16 with
// bf16 gradient sums, for dp then zero1, two steps each on `data`'s
// first batches.
std::vector<WalkthroughPrecisionRun> walkthrough_precision(const WalkthroughOptions& o,
                                                           const data::TokenData& data, int index,
                                                           std::ostream& out);

}  // namespace fanout::walkthrough::walk
