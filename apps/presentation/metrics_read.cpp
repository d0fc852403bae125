#include "apps/presentation/metrics_read.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/core/file_io.h"
#include "engine/core/json_parse.h"

namespace fanout::presentation {

namespace {

using nlohmann::json;

// A log of a billion steps is far beyond any run; the cap keeps a wrong path cheap.
constexpr uint64_t kMaxMetricsBytes = uint64_t{4} << 30;

void take(StepValues& into, int64_t step, const json& line, const char* key,
          const std::string& where) {
  if (!line.contains(key) || line[key].is_null()) return;
  FANOUT_CHECK(line[key].is_number(), where, ": \"", key, "\" is not a number");
  into[step] = line[key].get<double>();
}

}  // namespace

RunMetrics metrics_parse(const std::string& text, const std::string& name) {
  RunMetrics m;
  size_t at = 0;
  for (int64_t number = 1; at < text.size(); ++number) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name + ":" + std::to_string(number);
    json j = json_parse(line, where);
    FANOUT_CHECK(j.is_object(), where, ": not a JSON object");
    FANOUT_CHECK(j.contains("step") && j["step"].is_number_integer(), where,
                 ": no integer \"step\"");
    const auto step = j["step"].get<int64_t>();
    ++m.lines;
    take(m.loss, step, j, "loss", where);
    take(m.val_loss, step, j, "val_loss", where);
    take(m.lr, step, j, "lr", where);
    take(m.grad_norm, step, j, "grad_norm", where);
    take(m.tokens_per_s, step, j, "tokens_per_s", where);
    if (j.contains("peak_bytes") && !j["peak_bytes"].is_null()) {
      FANOUT_CHECK(j["peak_bytes"].is_object(), where, ": \"peak_bytes\" is not an object");
      for (const auto& [device, bytes] : j["peak_bytes"].items()) {
        if (bytes.is_null()) continue;
        FANOUT_CHECK(bytes.is_number(), where, ": \"peak_bytes\".\"", device, "\" is not a number");
        m.peak_bytes[device][step] = bytes.get<double>();
      }
    }
  }
  return m;
}

RunMetrics metrics_read(const std::string& path) {
  return metrics_parse(file_read_regular(path, kMaxMetricsBytes), path);
}

RunMetrics metrics_read_run(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
  std::error_code ec;
  FANOUT_CHECK(std::filesystem::is_directory(run_dir, ec), run_dir,
               ": not a directory (give a fanout train run directory)");
  FANOUT_CHECK(std::filesystem::exists(path, ec), run_dir,
               ": no metrics.jsonl (not a fanout train run directory?)");
  return metrics_read(path);
}

}  // namespace fanout::presentation
