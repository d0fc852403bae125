#pragma once
// The table `fanout bench` prints, fitted to the terminal. At --wide (width 0),
// one line per mode with every figure, as it always was. Narrower, the figures a
// mode is ranked by (tokens/s from the median step, its spread, the speed-up,
// the median step) and the bytes it moved per step print as each mode finishes,
// and the step-time breakdown follows in a block of its own once all have run;
// the peak bytes per device are in the memory table below (bench_memory_table).

#include <cstddef>
#include <string>
#include <vector>

#include "apps/bench/bench.h"
#include "apps/bench/bench_peers.h"
#include "apps/presentation/text_table.h"

namespace fanout::bench {

// "zero3", "zero3 bf16".
std::string bench_row_label(const presentation::BenchResult& r);
// "1.73x", or "-" without a baseline.
std::string bench_speedup_str(double tokens_per_s, double base);

// The columns of the table whose rows carry `labels` (every mode's, known before
// any runs, so that each row lines up with the head as it prints).
struct BenchTable {
  presentation::TextTable layout;
  size_t width = 0;  // 0: --wide
};
BenchTable bench_table(const std::vector<std::string>& labels, size_t width);
std::string bench_table_head(const BenchTable& t);
// One mode's line(s); a failed row says why in place of its figures. `base`: the
// baseline's tokens/s (0 when it failed: no speed-ups).
std::string bench_table_row(const BenchTable& t, const presentation::BenchResult& r, double base);
// A PyTorch peer's: its tokens/s and speed-up and what it ran, or why it did not.
std::string bench_table_peer(const BenchTable& t, const PeerRow& p, double base);
// Narrower than --wide: the step-time breakdown of the rows that ran (and the
// bytes they sent, where `table` had no room for them), a block of its own after
// the table ("" at --wide, where every row holds it).
std::string bench_phase_table(const BenchTable& table,
                              const std::vector<presentation::BenchResult>& rows);

// "" when in each precision the fastest row's step times stand clear of every
// other row's; else one line naming the rows whose interquartile ranges overlap
// the fastest's there: their order is the machine's noise, not the modes'.
std::string bench_ranking_line(const std::vector<presentation::BenchResult>& rows, size_t width);

}  // namespace fanout::bench
