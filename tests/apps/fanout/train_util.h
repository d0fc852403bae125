#pragma once
// Helpers for the `fanout train` CLI tests: a tiny model config and a text file
// to train on, metrics.jsonl read back, a run in the background that a test can
// signal (SIGINT, SIGKILL), and the PyTorch reference (tests/reference/llama_ref.py).

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"

namespace fanout::test {

// A temp directory with config.json (vocab 259, hidden 32, 2 layers, 4 heads, 2 kv
// heads, 64 positions: about 35k parameters) and data.txt (`documents` paragraphs of
// seeded random words, about 130 bytes each, separated by blank lines).
struct TrainFiles {
  explicit TrainFiles(int documents = 24);
  TempDir dir{"fanout-train"};
  std::string config = dir / "config.json", data = dir / "data.txt";
};

// `fanout train ARGS...` through the real binary.
CliResult train_cli(const std::vector<std::string>& args);

// Every line of a metrics.jsonl; step lines are the ones with "loss".
std::vector<nlohmann::json> metrics_read(const std::string& path);
std::vector<nlohmann::json> metrics_steps(const std::string& path);

// Names in `dir` (not recursive), sorted.
std::vector<std::string> dir_list(const std::string& dir);

// All tensors of DIR/model.safetensors, concatenated in file order, with their names.
struct FlatWeights {
  std::vector<std::string> names;
  std::vector<float> values;
};
FlatWeights weights_concat(const std::string& dir);

// Polls `done` every 100 us until it holds or `timeout_s` passes; returns whether it held.
bool poll_until(const std::function<bool()>& done, double timeout_s);

// `fanout ARGS...` started in the background, stdin from /dev/null, stdout and
// stderr to the files named, SIGINT and SIGTERM at their default dispositions.
pid_t fanout_spawn(const std::vector<std::string>& args, const std::string& out,
                   const std::string& err);

// `fanout train ARGS...` started in the background (stdout and stderr to files in a
// temp directory, SIGINT at its default disposition). The destructor SIGKILLs and
// reaps a run still going.
class BackgroundTrain {
 public:
  explicit BackgroundTrain(const std::vector<std::string>& args);
  ~BackgroundTrain();
  BackgroundTrain(const BackgroundTrain&) = delete;
  BackgroundTrain& operator=(const BackgroundTrain&) = delete;

  void signal(int sig) const;
  // The exit code (128 + signal when killed by one), or -1 if still running after timeout_s.
  int wait(double timeout_s);
  std::string out() const;
  std::string err() const;

 private:
  TempDir logs_{"fanout-bg"};
  pid_t pid_ = -1;
  bool reaped_ = false;
  int code_ = -1;
};

// Runs `/usr/bin/python3 tests/reference/llama_ref.py ARGS` (FANOUT_PYTHON and
// FANOUT_REFERENCE_DIR override both: tests/paths_util.h); returns its exit code and
// puts stdout and stderr together in `log`.
int reference_run(const std::string& args, const std::string& work_dir, std::string& log);

}  // namespace fanout::test
