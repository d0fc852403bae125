// --keep-last rotation: exactly the newest N complete step checkpoints stay,
// final/ and best/ are never touched, an incomplete (crashed) write never counts
// as one of the N, and nothing half-deleted is left behind. Also the held-out
// history that --save-best and --early-stop keep in trainer_state.json.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "apps/train/checkpoint.h"
#include "apps/train/checkpoint_rotation.h"
#include "models/llama_layout.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using fanout::test::has;
namespace fs = std::filesystem;

namespace {
// A directory that rotation takes for a complete checkpoint (it has trainer_state.json).
void fake_checkpoint(const std::string& dir, bool complete = true) {
  fs::create_directories(dir);
  test::file_write(dir + "/model.safetensors", "weights");
  if (complete) test::file_write(dir + "/trainer_state.json", "{}");
}
}  // namespace

TEST_CASE("rotation keeps exactly the newest N step checkpoints and never final/ or best/") {
  for (int64_t keep : {1, 2, 3, 7}) {
    CAPTURE(keep);
    test::TempDir dir("fanout-rotate");
    for (int step : {2, 4, 6, 8, 10, 100}) fake_checkpoint(dir / train::checkpoint_step_name(step));
    fake_checkpoint(dir / "final");
    fake_checkpoint(dir / train::kBestCheckpoint);
    test::file_write(dir / "metrics.jsonl", "{}\n");
    const std::vector<std::string> removed = train::checkpoint_rotate(dir.path, keep);
    const std::vector<std::string> all = {"step-000002", "step-000004", "step-000006",
                                          "step-000008", "step-000010", "step-000100"};
    const size_t kept = std::min<size_t>(keep, all.size());
    CHECK(removed == std::vector<std::string>(all.begin(), all.end() - kept));
    CHECK(train::checkpoint_steps_list(dir.path) ==
          std::vector<std::string>(all.end() - kept, all.end()));
    std::vector<std::string> expected = {"best", "final", "metrics.jsonl"};
    expected.insert(expected.end(), all.end() - kept, all.end());
    std::sort(expected.begin(), expected.end());
    CHECK(test::dir_list(dir.path) == expected);  // no temporaries left either
  }
}

TEST_CASE("rotation with 0 keeps every checkpoint") {
  test::TempDir dir("fanout-rotate");
  for (int step : {1, 2, 3}) fake_checkpoint(dir / train::checkpoint_step_name(step));
  CHECK(train::checkpoint_rotate(dir.path, 0).empty());
  CHECK(train::checkpoint_steps_list(dir.path).size() == 3);
}

TEST_CASE("a partially written checkpoint never displaces the last good one") {
  test::TempDir dir("fanout-rotate");
  fake_checkpoint(dir / "step-000003");
  fake_checkpoint(dir / "step-000004");
  // A crash mid-write: the temporary of step 5, and a step-6 without trainer_state.json.
  fake_checkpoint(dir / "step-000005.tmp-999999-0", false);
  fake_checkpoint(dir / "step-000006", false);
  CHECK(train::checkpoint_steps_list(dir.path) ==
        std::vector<std::string>{"step-000003", "step-000004"});
  CHECK(train::checkpoint_rotate(dir.path, 1) == std::vector<std::string>{"step-000003"});
  CHECK(fs::is_regular_file(dir / "step-000004/trainer_state.json"));
  // Incomplete directories are not rotation's to remove either.
  CHECK(fs::is_directory(dir / "step-000005.tmp-999999-0"));
  CHECK(fs::is_directory(dir / "step-000006"));
  CHECK(train::checkpoint_find_last(dir.path) == dir / "step-000004");
}

TEST_CASE("the held-out history round-trips through trainer_state.json and is checked") {
  test::TempDir dir("fanout-rotate");
  const models::LlamaConfig config = test::cli_test_config();
  const size_t total = static_cast<size_t>(models::LlamaLayout(config).total());
  train::Checkpoint c;
  c.config = config;
  c.params.assign(total, 0.01f);
  c.exp_avg.assign(total, 0.0f);
  c.exp_avg_sq.assign(total, 0.0f);
  c.state.step = 12;
  c.state.best_val_loss = 2.0 / 3.0;
  c.state.best_step = 8;
  c.state.evals_since_best = 2;
  c.state.val_loss = 0.75;
  train::checkpoint_write(dir / "a", c);
  const train::Checkpoint back = train::checkpoint_read(dir / "a");
  CHECK(back.state.best_val_loss == c.state.best_val_loss);
  CHECK(back.state.best_step == 8);
  CHECK(back.state.evals_since_best == 2);
  CHECK(back.state.val_loss == 0.75);
  // Before any evaluation (and in older checkpoints) there is no history.
  c.state.best_step = -1;
  c.state.val_loss = std::numeric_limits<double>::quiet_NaN();
  train::checkpoint_write(dir / "b", c);
  const std::string text = test::file_read(dir / "b/trainer_state.json");
  CHECK(!has(text, "validation"));
  CHECK(!has(text, "val_loss"));
  CHECK(train::checkpoint_read(dir / "b").state.best_step == -1);
  // A best step past the checkpoint's own is damage, named.
  nlohmann::json j = nlohmann::json::parse(test::file_read(dir / "a/trainer_state.json"));
  j["validation"]["best_step"] = 13;
  test::file_write(dir / "a/trainer_state.json", j.dump());
  const std::string err = test::error_of([&] { train::checkpoint_read(dir / "a"); });
  CHECK(has(err, "validation.best_step"));
}
