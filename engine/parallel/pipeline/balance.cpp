#include "engine/parallel/pipeline/balance.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "engine/core/check.h"
#include "engine/core/number_text.h"

namespace fanout::parallel {

namespace {

// " (embedding, 4 layers, head)": what `units` units are, in words.
std::string units_in_words(int units) {
  if (units < 2) return "";
  const int layers = units - 2;
  return " (embedding, " + std::to_string(layers) + (layers == 1 ? " layer" : " layers") +
         ", head)";
}

// best[k][i]: the least largest stage cost of units [i, n) cut into k stages of
// at least one unit each; infinity where fewer than k units remain.
// prefix[i]: the cost of units [0, i).
std::vector<std::vector<double>> suffix_best(const std::vector<double>& prefix, int K) {
  const int n = static_cast<int>(prefix.size()) - 1;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(K + 1, std::vector<double>(n + 1, inf));
  for (int i = 0; i < n; ++i) best[1][i] = prefix[n] - prefix[i];
  for (int k = 2; k <= K; ++k)
    for (int i = 0; i + k <= n; ++i)
      for (int j = i + 1; j + k - 1 <= n; ++j)
        best[k][i] = std::min(best[k][i], std::max(prefix[j] - prefix[i], best[k - 1][j]));
  return best;
}

}  // namespace

std::vector<int> balance_cut(const std::vector<double>& unit_costs, int stages) {
  const int n = static_cast<int>(unit_costs.size());
  FANOUT_CHECK(stages >= 1, "--pp must be at least 1 stage, got ", stages);
  FANOUT_CHECK(stages <= n, "--pp ", stages, " is more stages than the model's ", n, " units",
               units_in_words(n), ": each stage needs at least one unit");
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) {
    FANOUT_CHECK(std::isfinite(unit_costs[i]) && unit_costs[i] >= 0, "the cost of unit ", i, " is ",
                 unit_costs[i], ": unit costs must be finite and non-negative");
    prefix[i + 1] = prefix[i] + unit_costs[i];
  }
  const std::vector<std::vector<double>> best = suffix_best(prefix, stages);
  const double target = best[stages][0];
  // Each cut as early as it can be while the rest still reaches the optimum.
  std::vector<int> cut{0};
  for (int s = 0; s + 1 < stages; ++s) {
    const int b = cut.back(), rest = stages - s - 1;
    auto reaches = [&](int j) {
      return prefix[j] - prefix[b] <= target && best[rest][j] <= target;
    };
    int j = b + 1;
    while (j + rest < n && !reaches(j)) ++j;
    FANOUT_ASSERT(reaches(j), "no end for stage ", s, " reaches the optimum ", target);
    cut.push_back(j);
  }
  cut.push_back(n);
  return cut;
}

// ---------------------------------------------------------------------------
// --balance

std::vector<int> balance_from_layers(const std::vector<int>& layers_per_stage, int num_layers,
                                     int stages) {
  const std::vector<int>& L = layers_per_stage;
  const int K = stages;
  FANOUT_CHECK(K >= 1, "--pp must be at least 1 stage, got ", K);
  FANOUT_CHECK(num_layers >= 0, "a model cannot have ", num_layers, " layers");
  FANOUT_CHECK(L.size() == static_cast<size_t>(K), "--balance lists ", L.size(),
               " stages, --pp is ", K);
  int64_t sum = 0;
  for (int s = 0; s < K; ++s) {
    FANOUT_CHECK(L[s] >= 0, "--balance gives stage ", s, " ", L[s],
                 " layers: a layer count cannot be negative");
    FANOUT_CHECK(L[s] > 0 || s == 0 || s == K - 1, "--balance gives stage ", s,
                 " no layers: only the first and last stages may have none (they hold the "
                 "embedding and the head)");
    sum += L[s];
  }
  FANOUT_CHECK(sum == num_layers, "--balance sums to ", sum, " layers, the model has ", num_layers);
  // The embedding is unit 0 and the head unit num_layers + 1.
  std::vector<int> cut{0};
  for (int s = 0; s < K; ++s) cut.push_back(cut.back() + L[s] + (s == 0) + (s == K - 1));
  return cut;
}

std::vector<int> balance_from_layers(const std::vector<int>& layers_per_stage, int num_layers) {
  return balance_from_layers(layers_per_stage, num_layers,
                             static_cast<int>(layers_per_stage.size()));
}

std::vector<int> parse_balance_list(std::string_view text) {
  FANOUT_CHECK(!text.empty(), "--balance is empty: give the layers of each stage, e.g. 3,1,2");
  const std::string what = "--balance '" + std::string(text) + "'";
  std::vector<int> out;
  for (size_t at = 0;;) {
    const size_t comma = text.find(',', at);
    const std::string_view entry =
        text.substr(at, comma == std::string_view::npos ? comma : comma - at);
    FANOUT_CHECK(!entry.empty(), what,
                 " has an empty entry: give one layer count per stage, separated by commas");
    out.push_back(static_cast<int>(parse_whole_number(entry, 0, INT_MAX, what)));
    if (comma == std::string_view::npos) return out;
    at = comma + 1;
  }
}

// ---------------------------------------------------------------------------
// Description

namespace {

// "embedding, layers 0-1" for units [a, b) of a model with L layers.
std::string stage_contents(int a, int b, int L) {
  std::vector<std::string> parts;
  if (a == 0) parts.push_back("embedding");
  const int first = std::max(a, 1) - 1, end = std::min(b, L + 1) - 1;  // layers [first, end)
  if (end - first == 1) parts.push_back("layer " + std::to_string(first));
  if (end - first > 1)
    parts.push_back("layers " + std::to_string(first) + "-" + std::to_string(end - 1));
  if (b == L + 2) parts.push_back("head");
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

std::string describe_cut(const std::vector<int>& cut, int num_layers,
                         const std::vector<double>& unit_costs) {
  const int units = num_layers + 2;
  FANOUT_CHECK(cut.size() >= 2 && cut.front() == 0 && cut.back() == units, "a cut of ", units,
               " units runs from 0 to ", units);
  for (size_t s = 0; s + 1 < cut.size(); ++s)
    FANOUT_CHECK(cut[s] < cut[s + 1], "a cut gives stage ", s, " no units");
  FANOUT_CHECK(unit_costs.empty() || unit_costs.size() == static_cast<size_t>(units), "a cut of ",
               units, " units got ", unit_costs.size(), " unit costs");
  double total = 0;
  for (double c : unit_costs) total += c;
  std::string out = "stages:";
  for (size_t s = 0; s + 1 < cut.size(); ++s) {
    const int a = cut[s], b = cut[s + 1];
    out += (s == 0 ? " " : ", ") + std::to_string(s) + " = " +
           (b - a == 1 ? "unit " + std::to_string(a)
                       : "units " + std::to_string(a) + "-" + std::to_string(b - 1)) +
           " (" + stage_contents(a, b, num_layers);
    if (!unit_costs.empty()) {
      double cost = 0;
      for (int u = a; u < b; ++u) cost += unit_costs[u];
      char share[32];
      std::snprintf(share, sizeof share, ", %.0f%%", total > 0 ? 100 * cost / total : 0.0);
      out += share;
    }
    out += ")";
  }
  return out;
}

}  // namespace fanout::parallel
