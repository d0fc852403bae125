#pragma once
// What `fanout bench` reports once its rows ran, each from this one run: the
// best mode per precision against the PyTorch peers, the tokens/s picture
// (--svg), the figures document (--json), and the rows that failed.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench/bench.h"
#include "apps/bench/bench_peers.h"
#include "apps/presentation/bench_result.h"

namespace fanout::bench {

// Per precision that ran: "fanout fp32 best: dp-overlap, 1234 tokens/s ±3% =
// 1.20x PyTorch DDP fp32" (the peer when it ran; bf16 also against fp32's best).
std::vector<std::string> bench_best_lines(const std::vector<std::string>& precisions,
                                          const std::vector<presentation::BenchResult>& ran,
                                          const std::vector<PeerRow>& peers);
// The tokens/s picture of `rows` (those that ran) and the peers that ran, with
// speed-ups over `base_tps` (none where it is 0).
std::string bench_svg_page(const BenchSetup& setup,
                           const std::vector<presentation::BenchResult>& rows,
                           const std::vector<PeerRow>& peers, double base_tps);
// Every row's figures (bench_row_json), the peers, and the mfu and kernel
// reports where given (nullptr: not asked for).
nlohmann::json bench_json_document(const BenchSetup& setup, const presentation::BenchResult& base,
                                   const std::vector<presentation::BenchResult>& results,
                                   const std::vector<presentation::BenchResult>& ran,
                                   const std::vector<PeerRow>& peers, double base_tps,
                                   const nlohmann::json* mfu, const nlohmann::json* kernels);
// "2 of 15 rows failed (dp, zero1)" for the fanout rows that failed, "" when none
// did (a skipped or failed PyTorch peer never fails the bench).
std::string bench_failures(const presentation::BenchResult& base,
                           const std::vector<presentation::BenchResult>& results);

}  // namespace fanout::bench
