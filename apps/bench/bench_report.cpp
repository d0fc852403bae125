#include "apps/bench/bench_report.h"

#include <cstdio>

#include "apps/bench/bench_table.h"
#include "apps/presentation/bench_svg.h"
#include "apps/presentation/text_format.h"

namespace fanout::bench {

std::vector<std::string> bench_best_lines(const std::vector<std::string>& precisions,
                                          const std::vector<presentation::BenchResult>& ran,
                                          const std::vector<PeerRow>& peers) {
  std::vector<std::string> lines;
  auto best_of = [&](const std::string& precision) {
    const presentation::BenchResult* best = nullptr;
    for (const auto& r : ran)
      if (r.precision == precision && (!best || r.tokens_per_s > best->tokens_per_s)) best = &r;
    return best;
  };
  auto peer_of = [&](const std::string& precision) -> const PeerRow* {
    for (const auto& p : peers)
      if (p.status == "ok" && p.precision == precision && p.label.rfind("PyTorch DDP", 0) == 0)
        return &p;
    return nullptr;
  };
  for (const std::string& precision : precisions) {
    const presentation::BenchResult* best = best_of(precision);
    if (!best) continue;
    std::string line = presentation::strf("fanout %s best: %s, %.0f tokens/s %s", precision.c_str(),
                                          best->mode.c_str(), best->tokens_per_s,
                                          presentation::step_times_spread_str(best->step).c_str());
    if (const PeerRow* p = peer_of(precision))
      line += presentation::strf(" = %.2fx PyTorch DDP %s", best->tokens_per_s / p->tokens_per_s,
                                 precision == "bf16" ? "bf16 autocast" : "fp32");
    const presentation::BenchResult* f32 = best_of("fp32");
    if (precision == "bf16" && f32)
      line +=
          presentation::strf(" = %.2fx fanout fp32 best", best->tokens_per_s / f32->tokens_per_s);
    lines.push_back(line);
  }
  return lines;
}

std::string bench_svg_page(const BenchSetup& setup,
                           const std::vector<presentation::BenchResult>& rows_in,
                           const std::vector<PeerRow>& peers, double base_tps) {
  auto speedup = [&](double tps) { return base_tps > 0 ? tps / base_tps : 0.0; };
  std::vector<presentation::SvgRow> rows;
  for (const auto& r : rows_in)
    rows.push_back({bench_row_label(r), r.tokens_per_s, speedup(r.tokens_per_s), true, r.phases});
  for (const auto& p : peers) {
    if (p.status == "ok")
      rows.push_back({p.label, p.tokens_per_s, speedup(p.tokens_per_s), false, {}});
  }
  char subtitle[256];
  std::snprintf(subtitle, sizeof subtitle, "%.2fM parameters, global batch %lld x %lld, %s",
                setup.config.num_parameters() / 1e6, static_cast<long long>(setup.batch_size),
                static_cast<long long>(setup.seq_len), devices_str(setup.devices).c_str());
  return presentation::bench_svg("fanout bench: data-parallel modes", subtitle, rows);
}

nlohmann::json bench_json_document(const BenchSetup& setup, const presentation::BenchResult& base,
                                   const std::vector<presentation::BenchResult>& results,
                                   const std::vector<presentation::BenchResult>& ran,
                                   const std::vector<PeerRow>& peers, double base_tps,
                                   const nlohmann::json* mfu, const nlohmann::json* kernels) {
  nlohmann::json rows = nlohmann::json::array();
  rows.push_back(bench_row_json(base, base_tps, ran));
  for (const auto& r : results) rows.push_back(bench_row_json(r, base_tps, ran));
  for (const auto& p : peers) {
    nlohmann::json j = {
        {"mode", p.label}, {"peer", true}, {"precision", p.precision}, {"status", p.status}};
    if (p.status == "ok") {
      j["tokens_per_s"] = p.tokens_per_s;
    } else {
      j["reason"] = p.reason;
    }
    rows.push_back(j);
  }
  nlohmann::json doc = {{"parameters", setup.config.num_parameters()},
                        {"batch_size", setup.batch_size},
                        {"seq_len", setup.seq_len},
                        {"steps", setup.steps},
                        {"min_seconds", setup.min_seconds},
                        {"warmup", setup.warmup},
                        {"devices", devices_str(setup.devices)},
                        {"results", rows}};
  if (mfu) doc["mfu"] = *mfu;
  if (kernels) doc["kernels"] = *kernels;
  return doc;
}

std::string bench_failures(const presentation::BenchResult& base,
                           const std::vector<presentation::BenchResult>& results) {
  std::string failed;
  int n_failed = 0;
  auto note = [&](const presentation::BenchResult& r) {
    if (r.failed.empty()) return;
    failed += (failed.empty() ? "" : ", ") + bench_row_label(r);
    ++n_failed;
  };
  note(base);
  for (const auto& r : results) note(r);
  if (failed.empty()) return "";
  return std::to_string(n_failed) + " of " + std::to_string(results.size() + 1) + " rows failed (" +
         failed + ")";
}

}  // namespace fanout::bench
