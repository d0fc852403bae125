#pragma once
// The walkthrough's tensor-parallel section: the same model with every weight
// matrix split over two devices (--tp 2; one device named twice when there is
// one), one step on the modes' first batch: what each device holds of a layer
// and of the vocabulary, each all-reduce's bytes, the loss against dp's on the
// same batch and weights, and the memory each device took.

#include <ostream>

#include "apps/data/token_file.h"
#include "apps/walkthrough/walkthrough.h"

namespace fanout::walkthrough::walk {

// Prints section `index` to `out`; dp_loss: dp's first-step loss on the same
// batch and weights, which tensor parallelism's must equal.
WalkthroughTensor walkthrough_tensor(const WalkthroughOptions& o, const data::TokenData& data,
                                     double dp_loss, int index, std::ostream& out);

}  // namespace fanout::walkthrough::walk
