// The stage cut: balance_cut is optimal and picks the earliest of equally good
// cuts (checked against every cut of small models), --balance turns layers per
// stage into a cut and refuses what cannot be one, and describe_cut says it in
// one line.

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "engine/parallel/pipeline/balance.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::parallel;
using fanout::test::error_of;
using fanout::test::has;

namespace {

double largest_stage(const std::vector<double>& costs, const std::vector<int>& cut) {
  double worst = 0;
  for (size_t s = 0; s + 1 < cut.size(); ++s) {
    double c = 0;
    for (int u = cut[s]; u < cut[s + 1]; ++u) c += costs[u];
    worst = std::max(worst, c);
  }
  return worst;
}

// Every cut of costs.size() units into K stages, in lexicographic order: the
// first with the least largest stage.
std::vector<int> brute_force_cut(const std::vector<double>& costs, int K) {
  const int n = static_cast<int>(costs.size());
  std::vector<int> cut{0}, best;
  double best_cost = 0;
  std::function<void()> extend = [&] {
    const int s = static_cast<int>(cut.size()) - 1;  // stages placed so far
    if (s == K - 1) {
      cut.push_back(n);
      const double c = largest_stage(costs, cut);
      if (best.empty() || c < best_cost) best = cut, best_cost = c;
      cut.pop_back();
      return;
    }
    for (int j = cut.back() + 1; j + (K - 1 - s) <= n; ++j) {
      cut.push_back(j);
      extend();
      cut.pop_back();
    }
  };
  extend();
  return best;
}

}  // namespace

// ---------------------------------------------------------------------------
// balance_cut

TEST_CASE("balance_cut on small known models") {
  CHECK(balance_cut({1, 1, 1, 1, 1, 1}, 3) == std::vector<int>{0, 2, 4, 6});
  // Largest stage 2 either way; the earliest cuts leave stages 0 and 1 lighter.
  CHECK(balance_cut({1, 1, 1, 1, 1, 1}, 4) == std::vector<int>{0, 1, 2, 4, 6});
  CHECK(balance_cut({1, 1, 10, 1, 1}, 3) == std::vector<int>{0, 2, 3, 5});
  CHECK(balance_cut({1, 1, 10, 1, 1}, 2) == std::vector<int>{0, 2, 5});
  CHECK(balance_cut({3, 1, 2}, 3) == std::vector<int>{0, 1, 2, 3});
  CHECK(balance_cut({3, 1, 2}, 1) == std::vector<int>{0, 3});
  CHECK(balance_cut({5}, 1) == std::vector<int>{0, 1});
  CHECK(balance_cut({0, 0, 0}, 2) == std::vector<int>{0, 1, 3});
  // Embedding and head cheap, layers equal: the layers split evenly.
  CHECK(balance_cut({0.5, 4, 4, 4, 4, 1}, 2) == std::vector<int>{0, 3, 6});
}

TEST_CASE("balance_cut matches brute force over every cut of small models") {
  std::mt19937 rng(20240601);
  int cases = 0;
  for (int n = 1; n <= 8; ++n)
    for (int K = 1; K <= std::min(4, n); ++K)
      for (int trial = 0; trial < 25; ++trial, ++cases) {
        std::vector<double> costs(n);
        for (double& c : costs) c = static_cast<double>(rng() % 6);  // ties are common
        INFO("n=" << n << " K=" << K << " trial=" << trial);
        const std::vector<int> cut = balance_cut(costs, K);
        const std::vector<int> want = brute_force_cut(costs, K);
        CHECK(largest_stage(costs, cut) == largest_stage(costs, want));
        CHECK(cut == want);
      }
  CHECK(cases == 650);
}

TEST_CASE("balance_cut refuses more stages than units, no stages and bad costs") {
  const std::vector<double> six(6, 1.0);
  const std::string more = error_of([&] { balance_cut(six, 9); });
  CHECK(has(more, "--pp 9 is more stages than the model's 6 units (embedding, 4 layers, head)"));
  CHECK(has(error_of([&] { balance_cut(six, 0); }), "--pp must be at least 1 stage, got 0"));
  CHECK(has(error_of([&] { balance_cut({}, 1); }), "0 units"));
  CHECK(has(error_of([] { balance_cut({1, -2, 1}, 2); }), "the cost of unit 1 is -2"));
  CHECK(has(error_of([] { balance_cut({1, NAN, 1}, 2); }), "finite and non-negative"));
  CHECK_NOTHROW(balance_cut(six, 6));
}

// ---------------------------------------------------------------------------
// --balance

TEST_CASE("--balance turns layers per stage into a cut with the embedding and head at the ends") {
  // 4 layers: units 0 (embedding), 1..4 (layers), 5 (head).
  CHECK(balance_from_layers({2, 2}, 4, 2) == std::vector<int>{0, 3, 6});
  CHECK(balance_from_layers({1, 2, 1}, 4, 3) == std::vector<int>{0, 2, 4, 6});
  CHECK(balance_from_layers({0, 4}, 4, 2) == std::vector<int>{0, 1, 6});
  CHECK(balance_from_layers({4, 0}, 4, 2) == std::vector<int>{0, 5, 6});
  CHECK(balance_from_layers({0, 3, 1, 0}, 4, 4) == std::vector<int>{0, 1, 4, 5, 6});
  CHECK(balance_from_layers({4}, 4, 1) == std::vector<int>{0, 6});
  CHECK(balance_from_layers({3, 1}, 4) == std::vector<int>{0, 4, 6});
}

TEST_CASE("--balance refuses a wrong count, a wrong sum, a negative entry and an empty middle") {
  CHECK(has(error_of([] {
              balance_from_layers({1, 1, 2}, 4, 2);
            }),
            "--balance lists 3 stages, --pp is 2"));
  CHECK(has(error_of([] {
              balance_from_layers({3, 2}, 4, 2);
            }),
            "--balance sums to 5 layers, the model has 4"));
  CHECK(has(error_of([] {
              balance_from_layers({1, 2}, 4);
            }),
            "--balance sums to 3 layers, the model has 4"));
  const std::string negative = error_of([] { balance_from_layers({5, -1}, 4, 2); });
  CHECK(has(negative, "stage 1 -1 layers"));
  CHECK(has(negative, "cannot be negative"));
  const std::string middle = error_of([] { balance_from_layers({2, 0, 2}, 4, 3); });
  CHECK(has(middle, "--balance gives stage 1 no layers"));
  CHECK(has(middle, "only the first and last stages may have none"));
}

TEST_CASE("parse_balance_list reads comma-separated layer counts and names bad text") {
  CHECK(parse_balance_list("3,1,2") == std::vector<int>{3, 1, 2});
  CHECK(parse_balance_list("4") == std::vector<int>{4});
  CHECK(parse_balance_list("0,010") == std::vector<int>{0, 10});
  CHECK(has(error_of([] { parse_balance_list(""); }), "--balance is empty"));
  for (const char* bad : {"3,1,", ",3", "3,,1", ","}) {
    CAPTURE(bad);
    const std::string msg = error_of([&] { parse_balance_list(bad); });
    CHECK(has(msg, std::string("--balance '") + bad + "' has an empty entry"));
  }
  CHECK(has(error_of([] { parse_balance_list("3,x"); }),
            "--balance '3,x': 'x' is not a whole number"));
  CHECK(has(error_of([] { parse_balance_list("3, 1"); }), "' 1' is not a whole number"));
  CHECK(has(error_of([] { parse_balance_list("2.5"); }), "'2.5' is not a whole number"));
  CHECK(has(error_of([] { parse_balance_list("-1,5"); }), "'-1' is out of range"));
  CHECK(has(error_of([] { parse_balance_list("99999999999"); }), "is out of range"));
}

// ---------------------------------------------------------------------------
// describe_cut

TEST_CASE("describe_cut names each stage's units and cost share in one line") {
  CHECK(describe_cut({0, 3, 6}, 4, {}) ==
        "stages: 0 = units 0-2 (embedding, layers 0-1), 1 = units 3-5 (layers 2-3, head)");
  CHECK(describe_cut({0, 3, 6}, 4, {2, 1, 1, 1, 1, 4}) ==
        "stages: 0 = units 0-2 (embedding, layers 0-1, 40%), 1 = units 3-5 (layers 2-3, head, "
        "60%)");
  CHECK(describe_cut({0, 1, 2, 5, 6}, 4, {}) ==
        "stages: 0 = unit 0 (embedding), 1 = unit 1 (layer 0), 2 = units 2-4 (layers 1-3), "
        "3 = unit 5 (head)");
  CHECK(describe_cut({0, 6}, 4, {}) == "stages: 0 = units 0-5 (embedding, layers 0-3, head)");
  CHECK(has(error_of([] { describe_cut({0, 3, 5}, 4, {}); }), "runs from 0 to 6"));
  CHECK(has(error_of([] { describe_cut({0, 3, 3, 6}, 4, {}); }), "stage 1 no units"));
  CHECK(has(error_of([] { describe_cut({0, 6}, 4, {1, 2}); }), "got 2 unit costs"));
}
