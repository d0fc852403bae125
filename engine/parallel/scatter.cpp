#include "engine/parallel/scatter.h"

#include <algorithm>

#include "engine/core/check.h"

namespace fanout::parallel {

std::vector<int64_t> even_split(int64_t rows, int parts) {
  FANOUT_ASSERT(parts > 0 && rows >= 0, "split ", rows, " rows over ", parts, " parts");
  std::vector<int64_t> out(parts, rows / parts);
  for (int64_t i = 0; i < rows % parts; ++i) ++out[i];
  return out;
}

std::pair<int64_t, int64_t> even_split_range(int64_t rows, int parts, int index) {
  FANOUT_ASSERT(parts > 0 && rows >= 0 && index >= 0 && index < parts, "part ", index, " of ",
                parts);
  const int64_t base = rows / parts, extra = rows % parts;
  return {index * base + std::min<int64_t>(index, extra), base + (index < extra ? 1 : 0)};
}

ScatterLayout scatter_layout(const std::vector<int64_t>& rows) {
  ScatterLayout out;
  out.row0.assign(rows.size(), 0);
  int64_t at = 0;
  for (size_t r = 0; r < rows.size(); at += rows[r], ++r) {
    out.row0[r] = at;
    if (rows[r] > 0) out.active.push_back(static_cast<int>(r));
  }
  return out;
}

}  // namespace fanout::parallel
