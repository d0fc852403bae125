#pragma once
// The stage cut of pipeline parallelism: which of the model's units (embedding,
// decoder layers..., head, in forward order) each stage holds. balance_cut
// finds the contiguous cut whose slowest stage is fastest; --balance L1,L2,...
// gives the layers per stage by hand. A cut is K+1 unit indices
// 0 = b0 < b1 < ... < bK = units: stage s holds units [b_s, b_{s+1}).

#include <string>
#include <string_view>
#include <vector>

namespace fanout::parallel {

// The contiguous cut into `stages` stages, each of at least one unit, that
// minimises the largest stage cost (the sum of its units' costs). Exact (a
// dynamic programme); among equally good cuts, the one whose cuts come
// earliest (lexicographically smallest), so early stages, which hold the most
// micro-batches in flight under 1F1B, are no heavier than they must be.
// FANOUT_CHECK 1 <= stages <= units and costs finite and non-negative.
std::vector<int> balance_cut(const std::vector<double>& unit_costs, int stages);

// --balance L1,L2,...: decoder layers per stage; the embedding joins stage 0 and
// the head the last stage. Refuses (one line) a list that is not `stages`
// entries, does not sum to num_layers, has a negative entry, or gives a middle
// stage (0 < s < K-1) no layer; the first and last stage may have none.
std::vector<int> balance_from_layers(const std::vector<int>& layers_per_stage, int num_layers,
                                     int stages);
// As above, with as many stages as the list has entries.
std::vector<int> balance_from_layers(const std::vector<int>& layers_per_stage, int num_layers);

// "3,1,2" -> {3, 1, 2}. Entries are whole numbers as engine/core/number_text.h
// reads them (no spaces); an empty text or entry and a non-number are refused
// with one line naming the text.
std::vector<int> parse_balance_list(std::string_view text);

// "stages: 0 = units 0-2 (embedding, layers 0-1, 40%), 1 = units 3-5 (layers
// 2-3, head, 60%)": one line describing a cut of a model with num_layers
// layers; each stage's share of the cost in percent when unit_costs is not
// empty.
std::string describe_cut(const std::vector<int>& cut, int num_layers,
                         const std::vector<double>& unit_costs);

}  // namespace fanout::parallel
