#pragma once
// The held-out split a run makes of its own --data when it is given no --val-data:
// the last share of the tokens, which the run measures its held-out loss on and
// never trains on (Note [A run's own held-out split] in held_out.cpp). The split
// depends only on the data and the share, so a resumed run holds out what it held
// out before.

#include <cstdint>

#include "apps/data/token_file.h"

namespace fanout::data {

// The most tokens a run holds out whatever the share (an evaluation over them stays
// a few seconds on a CPU).
inline constexpr int64_t kHeldOutMaxTokens = int64_t{1} << 18;

// How many of `tokens` tokens a share holds out: round(share * tokens), at most
// kHeldOutMaxTokens and fewer than `tokens`; 0 for a share of 0.
int64_t held_out_count(int64_t tokens, double share);

// Cuts about the last `count` tokens off `data` and returns them as the held-out
// data; `data` keeps the rest. The cut moves forward to just after the first [EOT]
// in the first half of those tokens, so held-out documents start whole. Text
// data's documents are divided with its tokens (one the cut falls inside, in two).
// 0 < count < data.token_count().
TokenData token_data_hold_out(TokenData& data, int64_t count);

}  // namespace fanout::data
