#include "tests/apps/fanout/bench_util.h"

#include <fstream>

namespace fanout::test {

nlohmann::json bench_results(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).at("results");
}

std::map<std::string, nlohmann::json> bench_rows_by_mode(const std::string& path) {
  std::map<std::string, nlohmann::json> by_mode;
  for (const nlohmann::json& row : bench_results(path))
    by_mode[row["mode"].get<std::string>()] = row;
  return by_mode;
}

}  // namespace fanout::test
