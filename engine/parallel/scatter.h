#pragma once
// Scatter arithmetic: how a batch's rows are split over replicas (or ranks).
// One rule everywhere -- the engine's replicas and ddp's ranks alike: 10 rows
// over 4 -> 3, 3, 2, 2; 2 rows over 4 -> 1, 1, 0, 0.

#include <cstdint>
#include <utility>
#include <vector>

namespace fanout::parallel {

// Rows per part for `rows` rows over `parts` parts.
std::vector<int64_t> even_split(int64_t rows, int parts);
// Part `index`'s rows of even_split(rows, parts): {first row, count}.
std::pair<int64_t, int64_t> even_split_range(int64_t rows, int parts, int index);

// The parts that got rows, and each part's first row in the batch.
struct ScatterLayout {
  std::vector<int> active;
  std::vector<int64_t> row0;
};
ScatterLayout scatter_layout(const std::vector<int64_t>& rows);

}  // namespace fanout::parallel
