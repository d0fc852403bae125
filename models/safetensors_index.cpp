#include "models/safetensors_index.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/core/file_io.h"
#include "engine/core/json_parse.h"

namespace fanout::models {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;  // a 405B model's index is ~100 KB

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A shard must be a file of the index's own folder: no separators, no "." or "..".
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of("/\\") == std::string::npos && name.find('\0') == std::string::npos;
}

// The index's weight_map as tensor name -> shard file name, checked for shape.
std::map<std::string, std::string> read_weight_map(const std::string& path) {
  const std::string text = file_read_regular(path, kMaxIndexBytes);
  const json j = json_parse(text, path);
  FANOUT_CHECK(j.is_object(), path, ": expected a JSON object with a \"weight_map\", got a JSON ",
               j.type_name());
  auto wm = j.find("weight_map");
  FANOUT_CHECK(wm != j.end() && wm->is_object(), path,
               ": has no \"weight_map\" object (tensor name -> shard file)");
  FANOUT_CHECK(!wm->empty(), path, ": \"weight_map\" is empty");
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : wm->items()) {
    FANOUT_CHECK(shard.is_string(), path, ": weight_map[\"", name,
                 "\"] must be a shard file name, got ", shard.dump());
    const std::string file = shard.get<std::string>();
    FANOUT_CHECK(plain_file_name(file), path, ": shard \"", file, "\" (for tensor '", name,
                 "') is not a file name inside the checkpoint folder");
    map.emplace(name, file);
  }
  return map;
}
}  // namespace

SafetensorsSet SafetensorsSet::open(const std::string& path) {
  SafetensorsSet set;
  set.path_ = path;
  if (!ends_with(path, ".index.json")) {
    set.files_.push_back(SafetensorsFile::open(path));
    for (const SafetensorsEntry& e : set.files_[0].entries()) set.file_of_.emplace(e.name, 0);
    return set;
  }
  const std::map<std::string, std::string> map = read_weight_map(path);
  const fs::path folder = fs::path(path).parent_path();
  std::set<std::string> shards;
  for (const auto& [name, shard] : map) shards.insert(shard);
  for (const std::string& shard : shards) {
    const fs::path p = folder / shard;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(p, ec))) {
      const auto named =
          std::find_if(map.begin(), map.end(), [&](const auto& kv) { return kv.second == shard; });
      detail::throw_error(detail::str_cat(path, ": shard \"", shard, "\" (holding tensor '",
                                          named->first, "') does not exist"));
    }
    set.files_.push_back(SafetensorsFile::open(p.string()));
  }
  // Every tensor of every shard: in no other shard, then where the map says it is.
  auto shard_name = [&](size_t f) { return fs::path(set.files_[f].path()).filename().string(); };
  for (size_t f = 0; f < set.files_.size(); ++f) {
    for (const SafetensorsEntry& e : set.files_[f].entries()) {
      auto [it, fresh] = set.file_of_.emplace(e.name, f);
      FANOUT_CHECK(fresh, path, ": tensor '", e.name, "' is in two shards, \"",
                   shard_name(it->second), "\" and \"", shard_name(f), "\"");
    }
  }
  for (size_t f = 0; f < set.files_.size(); ++f) {
    for (const SafetensorsEntry& e : set.files_[f].entries()) {
      auto m = map.find(e.name);
      FANOUT_CHECK(m != map.end(), path, ": shard \"", shard_name(f), "\" holds tensor '", e.name,
                   "', which the weight_map does not list");
      FANOUT_CHECK(m->second == shard_name(f), path, ": tensor '", e.name, "' is in shard \"",
                   shard_name(f), "\", but the weight_map says \"", m->second, "\"");
    }
  }
  for (const auto& [name, shard] : map) {
    FANOUT_CHECK(set.file_of_.count(name), path, ": tensor '", name, "' is missing from shard \"",
                 shard, "\" (the weight_map says it is there)");
  }
  return set;
}

std::vector<const SafetensorsEntry*> SafetensorsSet::entries() const {
  std::vector<const SafetensorsEntry*> all;
  for (const SafetensorsFile& f : files_) {
    for (const SafetensorsEntry& e : f.entries()) all.push_back(&e);
  }
  return all;
}

const SafetensorsEntry* SafetensorsSet::find(const std::string& name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? nullptr : files_[it->second].find(name);
}

void SafetensorsSet::read_f32(const std::string& name, float* out, int64_t numel) const {
  auto it = file_of_.find(name);
  FANOUT_CHECK(it != file_of_.end(), path_, ": no tensor '", name, "'");
  files_[it->second].read_f32(name, out, numel);
}

std::string safetensors_model_path(const std::string& dir) {
  std::error_code ec;
  for (const char* name : {kSafetensorsSingle, kSafetensorsIndex}) {
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(fs::symlink_status(p, ec))) return p.string();
  }
  detail::throw_error(detail::str_cat("checkpoint '", dir, "' has no ", kSafetensorsSingle,
                                      " (nor ", kSafetensorsIndex, ")"));
}

}  // namespace fanout::models
