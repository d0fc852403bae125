#pragma once
// What `fanout bench --json PATH` wrote, read back for the bench tests.

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace fanout::test {

// The file's "results": one row per mode that ran or failed, in order.
nlohmann::json bench_results(const std::string& path);
// The same rows by their "mode".
std::map<std::string, nlohmann::json> bench_rows_by_mode(const std::string& path);

}  // namespace fanout::test
