#include "apps/train/checkpoint_rotation.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <filesystem>

#include "apps/train/checkpoint.h"
#include "engine/core/durable_file.h"

namespace fanout::train {

namespace {
namespace fs = std::filesystem;

std::atomic<uint64_t> remove_counter{0};

// The step of "step-<digits>", or -1 for any other name.
int64_t step_of(const std::string& name) {
  if (name.size() <= 5 || name.rfind("step-", 0) != 0) return -1;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  int64_t step = -1;
  auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
  return ec == std::errc() && end == name.data() + name.size() ? step : -1;
}
}  // namespace

std::vector<std::string> checkpoint_steps_list(const std::string& out_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    const int64_t step = step_of(name);
    std::error_code st;
    if (step < 0 || !fs::is_directory(fs::symlink_status(e.path(), st)) ||
        !fs::is_regular_file(e.path() / kCheckpointStateFile, st)) {
      continue;
    }
    found.emplace_back(step, name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (auto& [step, name] : found) names.push_back(std::move(name));
  return names;
}

std::vector<std::string> checkpoint_rotate(const std::string& out_dir, int64_t keep_last) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  const std::vector<std::string> steps = checkpoint_steps_list(out_dir);
  if (static_cast<int64_t>(steps.size()) <= keep_last) return removed;
  const size_t drop = steps.size() - static_cast<size_t>(keep_last);
  const fs::path out(out_dir);
  for (size_t i = 0; i < drop; ++i) {
    // Renamed first (atomic): a crash then leaves a temporary that no reader takes
    // for a checkpoint and run_dir_remove_stale_temps deletes, never half a step-N.
    const fs::path from = out / steps[i];
    // NAME.tmp-<pid>-<n>, the form run_dir.h cleans up, not yet in use.
    fs::path to;
    std::error_code ec;
    do {
      to = out / (steps[i] + ".tmp-" + std::to_string(::getpid()) + "-" +
                  std::to_string(remove_counter++));
    } while (fs::exists(fs::symlink_status(to, ec)));
    fs::rename(from, to, ec);
    if (ec) continue;
    dir_sync_best_effort(out);
    fs::remove_all(to, ec);
    removed.push_back(steps[i]);
  }
  return removed;
}

}  // namespace fanout::train
